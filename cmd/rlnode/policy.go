package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/cli"
	"github.com/rlnode/rlnode/httpapi"
	"github.com/rlnode/rlnode/policy"
)

const policyUsage = `usage:
  rlnode policy list
  rlnode policy get NAME
  rlnode policy set NAME --algorithm A --limit N --window D [--burst B] [--limit N --window D ...] [--consistency leased]
      [--align epoch|calendar [--timezone ZONE]] [--mode shadow]
  rlnode policy set NAME --algorithm concurrency --limit N   (N permits live at once per client)
  rlnode policy delete NAME
  rlnode policy apply -f FILE [--prune] [--dry-run]   (--prune: also delete what FILE lacks)
  rlnode policy import-envoy [--dry-run] [--merge-domains] [--anchored] FILE...   (envoyproxy/ratelimit YAML)
  rlnode policy sync-envoy --dir DIR [--watch] [--merge-domains] [--anchored]
(and --addr, --cluster-token, --json as for every admin command)`

// runPolicy dispatches `rlnode policy SUBCOMMAND`.
func runPolicy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, policyUsage)
		return usageErr("a subcommand is required")
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(stdout, policyUsage)
		return nil
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "list":
		return policyList(ctx, args, stdout, stderr)
	case "get":
		return policyGet(ctx, args, stdout, stderr)
	case "set":
		return policySet(ctx, args, stdout, stderr)
	case "delete":
		return policyDelete(ctx, args, stdout, stderr)
	case "apply":
		return policyApply(ctx, args, stdout, stderr)
	case "import-envoy":
		return policyImportEnvoy(ctx, args, stdout, stderr)
	case "sync-envoy":
		return policySyncEnvoy(ctx, args, stdout, stderr)
	}
	msg := fmt.Sprintf("unknown subcommand %q", sub)
	if s := cli.Suggest(sub, []string{"list", "get", "set", "delete", "apply", "import-envoy"}); s != "" {
		msg += fmt.Sprintf(" (did you mean %s?)", s)
	}
	return &cli.UsageError{Err: errors.New(msg), Hint: "see `rlnode policy -h` for the subcommands"}
}

type policyTable struct {
	Policies []policy.Policy `json:"policies"`
}

func fetchPolicies(ctx context.Context, a *adminFlags) ([]policy.Policy, error) {
	var l policyTable
	if err := a.call(ctx, http.MethodGet, httpapi.PoliciesPath, nil, &l); err != nil {
		return nil, err
	}
	return l.Policies, nil
}

func policyList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, a := newAdminFlags("policy list", "", stdout)
	if pos, err := parseAdmin(fs, args); err != nil {
		return err
	} else if len(pos) > 0 {
		return usageErr("policy list takes no arguments")
	}
	ps, err := fetchPolicies(ctx, a)
	if err != nil {
		return err
	}
	if a.json {
		return printJSON(stdout, policyTable{Policies: ps})
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	scoped := slices.ContainsFunc(ps, policy.Policy.IsGlobal)
	if scoped {
		// A SCOPE column only where global budgets exist: the table
		// others read stays as it was.
		fmt.Fprintln(tw, "NAME\tALGORITHM\tCONSISTENCY\tSCOPE\tLIMITS")
	} else {
		fmt.Fprintln(tw, "NAME\tALGORITHM\tCONSISTENCY\tLIMITS")
	}
	for _, p := range ps {
		if scoped {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.Name, p.Algorithm, consistencyText(p), scopeText(p), limitsText(p))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Name, p.Algorithm, consistencyText(p), limitsText(p))
	}
	return tw.Flush()
}

// limitsText is e.g. "10/1s burst 20, 1000/24h", "100/1m aligned" (windows
// aligned to the epoch), or what an Envoy descriptor without a limit does.
func limitsText(p policy.Policy) string {
	switch e := p.Envoy; {
	case e != nil && e.NoLimit:
		return "never limited (a value without rate_limit)"
	case e != nil && e.Unlimited:
		return "unlimited"
	}
	if p.IsConcurrency() && len(p.Limits) == 1 {
		return fmt.Sprintf("%d concurrent", p.Limits[0].Limit)
	}
	parts := make([]string, len(p.Limits))
	for i, l := range p.Limits {
		parts[i] = fmt.Sprintf("%d/%s", l.Limit, l.Window)
		if l.Burst > 0 {
			parts[i] += fmt.Sprintf(" burst %d", l.Burst)
		}
	}
	switch {
	case p.EpochAligned():
		parts[len(parts)-1] += " aligned"
	case p.CalendarAligned():
		zone := p.Timezone
		if zone == "" {
			zone = "UTC"
		}
		parts[len(parts)-1] += " calendar " + zone
	}
	if p.IsShadow() {
		parts[len(parts)-1] += " shadow"
	}
	return strings.Join(parts, ", ")
}

func policyGet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, a := newAdminFlags("policy get", "NAME", stdout)
	pos, err := parseAdmin(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("rlnode policy get NAME")
	}
	var p policy.Policy
	if err := a.call(ctx, http.MethodGet, httpapi.PoliciesPath+"/"+url.PathEscape(pos[0]), nil, &p); err != nil {
		return err
	}
	if a.json {
		return printJSON(stdout, p)
	}
	fmt.Fprintf(stdout, "%s\t%s\t%s\t%s\n", p.Name, p.Algorithm, consistencyText(p), limitsText(p))
	return nil
}

// consistencyText is "leased" (holders decide from leases) or "strict"
// (every hit through the log, the default the JSON leaves out).
func consistencyText(p policy.Policy) string {
	if p.IsLeased() {
		return policy.Leased
	}
	return "strict"
}

// scopeText is "local", "global" (defined here, lent to regions) or
// "global (mirrored from the parent)" (a region's copy, decided from
// slices).
func scopeText(p policy.Policy) string {
	switch {
	case p.Mirrored:
		return "global (mirrored from the parent)"
	case p.IsGlobal():
		return "global"
	}
	return "local"
}

// repeated collects a flag given several times; "a,b" counts as two.
type repeated []string

func (r *repeated) String() string { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		*r = append(*r, strings.TrimSpace(s))
	}
	return nil
}

func policySet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, a := newAdminFlags("policy set", "NAME", stdout)
	var alg, consistency, align, timezone, mode string
	var limits, windows, bursts repeated
	fs.StringVar(&alg, "algorithm", "fixed_window", "fixed_window, sliding_window, token_bucket or concurrency (--limit N permits live at once, no --window)")
	fs.StringVar(&consistency, "consistency", "strict", "strict (every hit through the log) or leased (nodes decide hot keys from leases; docs/leased-policies.md)")
	fs.StringVar(&align, "align", "anchored", "anchored (windows start at each key's first hit), epoch, or calendar (fixed_window: days, ISO weeks, months, years)")
	fs.StringVar(&timezone, "timezone", "", "IANA zone of --align calendar periods (default UTC), e.g. Europe/Berlin")
	fs.StringVar(&mode, "mode", "enforce", "enforce, or shadow (count as usual, never refuse; answers say would-refuse)")
	fs.Var(&limits, "limit", "hits allowed per window; repeat (or N,M) for several limits, paired in order with --window")
	fs.Var(&windows, "window", "window of the limit at the same position (a Go duration: 1s, 1m, 24h; or 1d, 1w; with --align calendar 1d, 1w, 1mo, 1y)")
	fs.Var(&bursts, "burst", "token_bucket capacity of the limit at the same position (default: its limit)")
	pos, err := parseAdmin(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("rlnode policy set NAME --algorithm A --limit N --window D [--burst B]")
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	cur, exists, err := currentPolicy(ctx, a, pos[0])
	if err != nil {
		return err
	}
	var kept []string
	if exists {
		kept = keepUnchanged(cur, given, &alg, &consistency, &align, &timezone, &mode, &limits, &windows, &bursts)
	}
	p, err := policyFromFlags(pos[0], alg, limits, windows, bursts, policy.Policy{Consistency: consistency, Align: align, Timezone: timezone, Mode: mode})
	if err != nil {
		if len(kept) > 0 {
			return usageErr("%v (kept from the current policy: %s; give those flags to change them)", err, strings.Join(kept, ", "))
		}
		return usageErr("%v", err)
	}
	if exists {
		p.Envoy = cur.Envoy // no flag sets it: an Envoy mapping stays
	}
	var res struct {
		Result string `json:"result"`
	}
	if err := a.call(ctx, http.MethodPut, httpapi.PoliciesPath+"/"+url.PathEscape(p.Name), p, &res); err != nil {
		return err
	}
	if a.json {
		return printJSON(stdout, map[string]any{"result": res.Result, "policy": p, "kept": kept})
	}
	fmt.Fprintf(stdout, "%s %s (%s %s)\n", res.Result, p.Name, p.Algorithm, limitsText(p))
	if len(kept) > 0 {
		fmt.Fprintf(stdout, "kept from the current policy: %s\n", strings.Join(kept, ", "))
	}
	return nil
}

// currentPolicy reads the policy policy set is about to replace; exists
// is false when there is none yet (a 404).
func currentPolicy(ctx context.Context, a *adminFlags, name string) (p policy.Policy, exists bool, err error) {
	err = a.call(ctx, http.MethodGet, httpapi.PoliciesPath+"/"+url.PathEscape(name), nil, &p)
	var ae *answerError
	if errors.As(err, &ae) && ae.status == http.StatusNotFound {
		return p, false, nil
	}
	return p, err == nil, err
}

// keepUnchanged fills what policy set was not given from the policy it
// replaces, so `policy set api --limit 200 --window 1s` changes the limit
// of a leased sliding-window policy and leaves it leased and sliding
// (a PUT replaces the whole policy). It returns what it kept, as the
// flags that would change it.
func keepUnchanged(cur policy.Policy, given map[string]bool, alg, consistency, align, timezone, mode *string, limits, windows, bursts *repeated) []string {
	cur = cur.Canonical()
	var kept []string
	keep := func(flag string, dst *string, v, shown string) {
		if !given[flag] && v != "" && *dst != v {
			*dst = v
			kept = append(kept, "--"+flag+" "+shown)
		}
	}
	keep("algorithm", alg, cur.Algorithm, cur.Algorithm)
	keep("consistency", consistency, cur.Consistency, cur.Consistency)
	keep("align", align, cur.Align, cur.Align)
	keep("timezone", timezone, cur.Timezone, cur.Timezone)
	keep("mode", mode, cur.Mode, cur.Mode)
	if !given["limit"] && !given["window"] && !given["burst"] && len(cur.Limits) > 0 {
		*limits, *windows, *bursts = nil, nil, nil
		for _, l := range cur.Limits {
			*limits = append(*limits, strconv.FormatInt(l.Limit, 10))
			if l.Window != 0 || cur.Algorithm != policy.Concurrency {
				*windows = append(*windows, l.Window.String())
			}
			*bursts = append(*bursts, strconv.FormatInt(cmp.Or(l.Burst, l.Limit), 10)) // burst 0 is the limit
		}
		if !slices.ContainsFunc(cur.Limits, func(l policy.Limit) bool { return l.Burst != 0 }) {
			*bursts = nil // no burst given when it was set: none now either
		}
		kept = append(kept, "--limit/--window "+limitsText(cur))
	}
	return kept
}

// policyFromFlags builds and validates a policy from policy set's flags;
// opts carries the options (consistency, align, timezone, mode).
func policyFromFlags(name, alg string, limits, windows, bursts []string, opts policy.Policy) (policy.Policy, error) {
	p := policy.Policy{Name: name, Algorithm: alg, Consistency: opts.Consistency, Align: opts.Align, Timezone: opts.Timezone, Mode: opts.Mode}.Canonical()
	if alg == policy.Concurrency && len(windows) == 0 && len(limits) == 1 {
		// permits live at once: no window (docs/budgets.md)
		n, err := strconv.ParseInt(limits[0], 10, 64)
		if err != nil {
			return p, fmt.Errorf("--limit %q: want a whole number", limits[0])
		}
		p.Limits = []policy.Limit{{Limit: n}}
		return p, p.Validate()
	}
	if len(limits) == 0 || len(limits) != len(windows) {
		return p, fmt.Errorf("give each --limit a --window (got %d limits, %d windows)", len(limits), len(windows))
	}
	if len(bursts) > 0 && len(bursts) != len(limits) {
		return p, fmt.Errorf("give --burst for every limit or for none (got %d bursts for %d limits)", len(bursts), len(limits))
	}
	for i := range limits {
		n, err := strconv.ParseInt(limits[i], 10, 64)
		if err != nil {
			return p, fmt.Errorf("--limit %q: want a whole number", limits[i])
		}
		w, err := policy.ParseWindow(windows[i])
		if err != nil {
			return p, fmt.Errorf("--window %q: want a Go duration such as 1s, 1m or 24h, or 1d, 1w, 1mo, 1y", windows[i])
		}
		l := policy.Limit{Limit: n, Window: w}
		if len(bursts) > 0 {
			if l.Burst, err = strconv.ParseInt(bursts[i], 10, 64); err != nil || l.Burst < 1 {
				return p, fmt.Errorf("--burst %q: want a whole number >= 1", bursts[i])
			}
		}
		p.Limits = append(p.Limits, l)
	}
	return p, p.Validate()
}

func policyDelete(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, a := newAdminFlags("policy delete", "NAME", stdout)
	pos, err := parseAdmin(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("rlnode policy delete NAME")
	}
	if err := a.call(ctx, http.MethodDelete, httpapi.PoliciesPath+"/"+url.PathEscape(pos[0]), nil, nil); err != nil {
		return err
	}
	if a.json {
		return printJSON(stdout, map[string]string{"deleted": pos[0]})
	}
	fmt.Fprintf(stdout, "deleted %s\n", pos[0])
	return nil
}

// policyApply sets the policies a file lists (adds and changes only).
// With --prune it makes the table equal to the file in one log entry,
// deleting what the file does not list; without it, those policies stay and
// are named. --dry-run prints the same diff and changes nothing.
func policyApply(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, a := newAdminFlags("policy apply", "", stdout)
	var file string
	var dry, prune bool
	fs.StringVar(&file, "f", "", "YAML or JSON file of policies (required)")
	fs.BoolVar(&dry, "dry-run", false, "print what would change and change nothing")
	fs.BoolVar(&prune, "prune", false, "also delete the policies the file does not list (default included), in one change")
	pos, err := parseAdmin(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 || file == "" {
		return usageErr("rlnode policy apply -f FILE [--prune] [--dry-run]")
	}
	want, err := policy.ReadFile(file)
	if err != nil {
		return usageErr("%v", err)
	}
	if len(want) == 0 {
		// An empty or truncated file must not wipe the table (default
		// included, which every GET /check/:client needs).
		return usageErr("%s defines no policies: apply would delete every policy; delete them one by one with rlnode policy delete NAME", file)
	}
	a.stderr = stderr
	var d applyDiff
	if prune && !dry {
		// One whole-table write, computed again if the table changes
		// meanwhile (replaceTable).
		err = replaceTable(ctx, a, func(all []policy.Policy) ([]policy.Policy, error) {
			var envoyKept []policy.Policy
			d, envoyKept = diffApply(all, want)
			if len(d.added)+len(d.changed)+len(d.removed) == 0 {
				return nil, errNoWrite
			}
			return append(slices.Clone(want), envoyKept...), nil
		})
		if err != nil {
			return err
		}
		return d.print(stdout, a.json, dry, prune)
	}
	all, err := fetchPolicies(ctx, a)
	if err != nil {
		return err
	}
	d, _ = diffApply(all, want)
	if !dry {
		if err := writeChanges(ctx, a, false, d.added, d.changed, nil, func(string, string, *policy.Policy, string) {}); err != nil {
			return err
		}
	}
	return d.print(stdout, a.json, dry, prune)
}

// diffApply is what applying want to the table all changes, and the
// policies with an Envoy match it keeps: those belong to import-envoy (and
// to the gRPC service's limit overrides), so apply leaves them alone unless
// the file names them, even with --prune.
func diffApply(all, want []policy.Policy) (applyDiff, []policy.Policy) {
	wanted := make(map[string]bool, len(want))
	for _, p := range want {
		wanted[p.Name] = true
	}
	var have, envoyKept []policy.Policy
	for _, p := range all {
		if p.Envoy == nil || wanted[p.Name] {
			have = append(have, p)
		} else {
			envoyKept = append(envoyKept, p)
		}
	}
	var d applyDiff
	d.added, d.changed, d.removed = policy.Diff(have, want)
	return d, envoyKept
}

// applyDiff is what apply changes: added and changed policies, and the
// names of policies the file does not list.
type applyDiff struct {
	added, changed []policy.Policy
	removed        []string
}

func (d applyDiff) print(w io.Writer, asJSON, dry, prune bool) error {
	removed, kept := d.removed, []string{}
	if !prune {
		removed, kept = []string{}, orEmpty(d.removed)
	}
	if asJSON {
		return printJSON(w, map[string]any{"added": names(d.added), "changed": names(d.changed),
			"removed": orEmpty(removed), "notInFile": kept, "dryRun": dry, "prune": prune})
	}
	verb := ""
	if dry {
		verb = "would be "
	}
	for _, p := range d.added {
		fmt.Fprintf(w, "%sadded %s\n", verb, p.Name)
	}
	for _, p := range d.changed {
		fmt.Fprintf(w, "%schanged %s\n", verb, p.Name)
	}
	for _, name := range removed {
		fmt.Fprintf(w, "%sremoved %s\n", verb, name)
		if name == policy.Default {
			fmt.Fprintf(w, "  (%s is the policy GET /check/CLIENT uses: such checks answer 404 unknown_policy until it is set again)\n", name)
		}
	}
	for _, name := range kept {
		fmt.Fprintf(w, "kept %s (not in the file; --prune removes it)\n", name)
	}
	if len(d.added)+len(d.changed)+len(removed) == 0 {
		fmt.Fprintln(w, "no changes")
	}
	return nil
}

// writeChanges puts the added and changed policies and deletes the removed
// ones, in that order (nothing when dry), and reports each with its verb
// ("" or "would be ") and what happened (p is nil for a removal). It
// stops when ctx ends.
func writeChanges(ctx context.Context, a *adminFlags, dry bool, added, changed []policy.Policy, removed []string,
	report func(verb, what string, p *policy.Policy, name string)) error {
	verb := ""
	if dry {
		verb = "would be "
	}
	for _, group := range []struct {
		what string
		ps   []policy.Policy
	}{{"added", added}, {"changed", changed}} {
		for i := range group.ps {
			p := &group.ps[i]
			if err := ctx.Err(); err != nil {
				return err
			}
			if !dry {
				if err := a.call(ctx, http.MethodPut, httpapi.PoliciesPath+"/"+url.PathEscape(p.Name), p, nil); err != nil {
					return err
				}
			}
			report(verb, group.what, p, p.Name)
		}
	}
	for _, name := range removed {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !dry {
			if err := a.call(ctx, http.MethodDelete, httpapi.PoliciesPath+"/"+url.PathEscape(name), nil, nil); err != nil {
				return err
			}
		}
		report(verb, "removed", nil, name)
	}
	return nil
}

func names(ps []policy.Policy) []string {
	out := []string{}
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

var _ flag.Value = (*repeated)(nil)
