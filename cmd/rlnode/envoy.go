package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"

	"github.com/rlnode/rlnode/policy"
)

// envoyFlags are the loader's options, shared by import-envoy and sync-envoy.
func envoyFlags(fs *flag.FlagSet, opt *policy.EnvoyOptions) {
	fs.BoolVar(&opt.MergeDomains, "merge-domains", false, "merge files that configure the same domain (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG); otherwise that is an error")
	fs.BoolVar(&opt.Anchored, "anchored", false, "anchor each key's windows at its first hit instead of aligning them to the epoch as envoyproxy/ratelimit does")
	fs.StringVar(&opt.Consistency, "consistency", "strict", "strict (every hit through the log) or leased (every node decides hot descriptors from leases: never over the limit, not linearizable; docs/leased-policies.md) for every imported policy")
	fs.Func("leased-domain", "make this domain's policies leased whatever --consistency says (repeatable): the per-domain choice", func(d string) error {
		if d == "" {
			return errors.New("empty domain")
		}
		opt.LeasedDomains = append(opt.LeasedDomains, d)
		return nil
	})
}

// policyImportEnvoy turns envoyproxy/ratelimit configuration files into
// replicated policies: for each domain in the files, the cluster's envoy
// policies of that domain become exactly the file's descriptors (added,
// changed, removed), so re-importing an edited file is how it is updated.
func policyImportEnvoy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, a := newAdminFlags("policy import-envoy", "FILE...", stdout)
	var dry bool
	var opt policy.EnvoyOptions
	fs.BoolVar(&dry, "dry-run", false, "print what would change and change nothing")
	envoyFlags(fs, &opt)
	files, err := parseAdmin(fs, args)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return usageErr("import-envoy needs at least one FILE: rlnode policy import-envoy [--dry-run] [--merge-domains] [--anchored] [--consistency strict|leased] [--leased-domain D]... FILE...")
	}
	domains, want, err := policy.ReadEnvoyFiles(opt, files...)
	if err != nil {
		return usageErr("%v", err)
	}
	a.stderr = stderr
	ch, err := applyEnvoy(ctx, a, func([]policy.Policy) []string { return domains }, want, dry, stdout)
	if err != nil {
		return err
	}
	if a.json {
		return printJSON(stdout, map[string]any{"domains": domains, "added": names(ch.added), "changed": names(ch.changed), "removed": orEmpty(ch.removed), "dryRun": dry})
	}
	if ch.none() {
		fmt.Fprintln(stdout, "no changes")
	}
	return nil
}

// envoyChanges is what applyEnvoy changed (or would have).
type envoyChanges struct {
	added, changed []policy.Policy
	removed        []string
}

func (c envoyChanges) none() bool { return len(c.added)+len(c.changed)+len(c.removed) == 0 }

// applyEnvoy makes the cluster's envoy policies of the given domains
// exactly want in one change: the new table (every other policy as it is,
// plus want) replaces the old one in one log entry (PUT /v1/policies), so
// no node ever holds half a sync. Each line is printed unless --json. A
// domain in domains with no policy in want loses all its policies; owned
// may add domains seen in the table. The write names the table version it
// was computed from, and is computed again when another writer (an
// operator, a limit override's policy the RLS adds) changed the table
// meanwhile (replaceTable), so nothing they added is deleted by it.
func applyEnvoy(ctx context.Context, a *adminFlags, owned func(all []policy.Policy) []string, want []policy.Policy, dry bool, stdout io.Writer) (envoyChanges, error) {
	var ch envoyChanges
	err := replaceTable(ctx, a, func(all []policy.Policy) ([]policy.Policy, error) {
		table, c, err := envoyTable(all, owned(all), want)
		ch = c
		if err != nil {
			return nil, err
		}
		if dry || ch.none() {
			return nil, errNoWrite
		}
		return table, nil
	})
	if err != nil {
		return envoyChanges{}, err
	}
	if !a.json {
		ch.print(stdout, dry)
	}
	return ch, nil
}

// envoyTable is the table all becomes when the envoy policies of domains
// are exactly want, and what that changes.
func envoyTable(all []policy.Policy, domains []string, want []policy.Policy) ([]policy.Policy, envoyChanges, error) {
	var have, table []policy.Policy
	byName := make(map[string]policy.Policy, len(all))
	for _, p := range all {
		byName[p.Name] = p
		if p.Envoy != nil && slices.Contains(domains, p.Envoy.Domain) {
			have = append(have, p)
		} else {
			table = append(table, p)
		}
	}
	for _, p := range want {
		if q, ok := byName[p.Name]; ok && (q.Envoy == nil || q.Envoy.Domain != p.Envoy.Domain) {
			return nil, envoyChanges{}, fmt.Errorf("policy %s already exists and was not imported from domain %s; delete or rename it first", p.Name, p.Envoy.Domain)
		}
	}
	var ch envoyChanges
	ch.added, ch.changed, ch.removed = policy.Diff(have, want)
	return append(table, want...), ch, nil
}

// print writes one line per change, as writeChanges reports them.
func (c envoyChanges) print(w io.Writer, dry bool) {
	verb := ""
	if dry {
		verb = "would be "
	}
	for _, g := range []struct {
		what string
		ps   []policy.Policy
	}{{"added", c.added}, {"changed", c.changed}} {
		for _, p := range g.ps {
			fmt.Fprintf(w, "%s%s %s\t%s\n", verb, g.what, p.Name, limitsText(p))
		}
	}
	for _, name := range c.removed {
		fmt.Fprintf(w, "%sremoved %s\n", verb, name)
	}
}
