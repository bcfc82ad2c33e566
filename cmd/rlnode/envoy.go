package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"

	"github.com/rlnode/rlnode/httpapi"
	"github.com/rlnode/rlnode/policy"
)

// policyImportEnvoy turns envoyproxy/ratelimit configuration files into
// replicated policies: for each domain in the files, the cluster's envoy
// policies of that domain become exactly the file's descriptors (added,
// changed, removed), so re-importing an edited file is how it is updated.
func policyImportEnvoy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, a := newAdminFlags("policy import-envoy", "FILE...", stderr)
	var dry bool
	fs.BoolVar(&dry, "dry-run", false, "print what would change and change nothing")
	files, err := parseAdmin(fs, args)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return usageErr("import-envoy needs at least one FILE: rlnode policy import-envoy [--dry-run] FILE...")
	}
	domains, want, err := policy.ReadEnvoyFiles(files...)
	if err != nil {
		return usageErr("%v", err)
	}
	all, err := fetchPolicies(ctx, a)
	if err != nil {
		return err
	}
	var have []policy.Policy
	for _, p := range all {
		if p.Envoy != nil && slices.Contains(domains, p.Envoy.Domain) {
			have = append(have, p)
		}
	}
	for _, p := range want {
		for _, q := range all {
			if q.Name == p.Name && (q.Envoy == nil || q.Envoy.Domain != p.Envoy.Domain) {
				return fmt.Errorf("policy %s already exists and was not imported from domain %s; delete or rename it first", p.Name, p.Envoy.Domain)
			}
		}
	}
	added, changed, removed := policy.Diff(have, want)
	verb := ""
	if dry {
		verb = "would be "
	}
	for _, p := range append(added, changed...) {
		if !dry {
			if err := a.call(ctx, http.MethodPut, httpapi.PoliciesPath+"/"+url.PathEscape(p.Name), p, nil); err != nil {
				return err
			}
		}
		what := "changed"
		if isIn(p, added) {
			what = "added"
		}
		if !a.json {
			fmt.Fprintf(stdout, "%s%s %s\t%s\n", verb, what, p.Name, limitsText(p))
		}
	}
	for _, name := range removed {
		if !dry {
			if err := a.call(ctx, http.MethodDelete, httpapi.PoliciesPath+"/"+url.PathEscape(name), nil, nil); err != nil {
				return err
			}
		}
		if !a.json {
			fmt.Fprintf(stdout, "%sremoved %s\n", verb, name)
		}
	}
	if a.json {
		return printJSON(stdout, map[string]any{"domains": domains, "added": names(added), "changed": names(changed), "removed": orEmpty(removed), "dryRun": dry})
	}
	if len(added)+len(changed)+len(removed) == 0 {
		fmt.Fprintln(stdout, "no changes")
	}
	return nil
}
