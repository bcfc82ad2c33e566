package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rlnode/rlnode/jepsen-lite/checker"
)

// judge runs the checker, writes the report and returns the exit code and
// the verdict line.
func (r *runner) judge(history []opRecord, faults []faultRecord, finalStart, finalEnd float64) (int, string) {
	res := r.checkHistory(history, faults)
	r.sum.LeasedFill = leasedFillByFault(res.Leased, faults, r.t0)
	for _, f := range r.sum.LeasedFill {
		r.log.Printf("leased under-admission during %s: %d full windows filled %.0f%% on average, %.0f%% at least", f.Fault, f.Windows, f.Fill*100, f.MinFill*100)
	}
	r.sum.Counts = countOps(history)
	r.sum.Availability = computeAvailability(history, faults, finalStart, finalEnd)
	r.sum.Crashes = append(r.sum.Crashes, r.cl.crashList()...)
	r.collectFailures(res, faults)
	r.sum.Valid = len(r.sum.Failures) == 0
	r.sum.Verdict = map[bool]string{true: "VALID", false: "INVALID"}[r.sum.Valid]
	r.writeReport(history, faults, finalStart, finalEnd)
	return r.verdictLine(faults)
}

// checkHistory runs the checker over the ok and unknown ops and, when it
// finds violations, writes porcupine's visualizations of them.
func (r *runner) checkHistory(history []opRecord, faults []faultRecord) checker.Result {
	o := r.o
	cfg := checker.Config{Limit: o.limit, WindowMs: o.window.Milliseconds(), Timeout: o.checkTimeout, StartUnixMs: r.t0.UnixMilli(),
		ClockJumps: clockJumps(faults, o.skew)}
	if r.pols != nil {
		cfg.Policies = r.pols.checkerPolicies()
		r.sum.Policies = cfg.Policies
	}
	hist := checkerHistory(history)
	r.log.Printf("checking %d ops (%d failed ops left out)...", len(hist), len(history)-len(hist))
	t := time.Now()
	res := checker.Check(cfg, hist)
	r.log.Printf("checker done in %s: valid=%v, %d violations", time.Since(t).Round(time.Millisecond), res.Valid, len(res.Violations))
	r.sum.Checker = checkerSummary{Valid: res.Valid, Keys: res.Keys, Counts: res.Counts, Leased: res.Leased}
	for _, l := range res.Leased {
		r.log.Printf("leased %s (%s): %d allowed, %d refused, %d decided locally; under-admission: %d full windows filled %.0f%% on average, %.0f%% at least",
			l.Key, l.Algorithm, l.Allowed, l.Refused, l.Local, l.FullWindows, l.Fill*100, l.MinFill*100)
	}
	r.sum.Violations = res.Violations
	if res.Valid {
		return res
	}
	paths, err := checker.WriteVisualizations(cfg, hist, o.out)
	if err != nil {
		r.sum.Warnings = append(r.sum.Warnings, "visualizations: "+err.Error())
	}
	for i := range paths {
		paths[i] = filepath.Base(paths[i])
	}
	r.sum.Files["visualizations"] = paths
	for _, v := range res.Violations {
		r.log.Loudf("violation %s key %s: %s ops %v", v.Check, v.Key, v.Detail, firstN(v.OpIDs, 20))
	}
	return res
}

// collectFailures adds to the summary everything that makes the run
// INVALID (and, as warnings, faults that failed but ran cleanly another
// time).
func (r *runner) collectFailures(res checker.Result, faults []faultRecord) {
	if !res.Valid {
		r.sum.Failures = append(r.sum.Failures, fmt.Sprintf("checker: %d violation(s)", len(res.Violations)))
	}
	if n := len(r.budgetViolations); n > 0 {
		r.sum.Failures = append(r.sum.Failures, fmt.Sprintf("budgets: %d violation(s)", n))
		r.sum.Violations = append(r.sum.Violations, r.budgetViolations...)
		for _, v := range r.budgetViolations {
			r.log.Loudf("violation %s key %s: %s ops %v", v.Check, v.Key, v.Detail, firstN(v.OpIDs, 20))
		}
	}
	if !r.sum.Convergence.OK {
		r.sum.Failures = append(r.sum.Failures, "convergence: "+r.sum.Convergence.Detail)
	}
	for _, c := range r.sum.Crashes {
		r.sum.Failures = append(r.sum.Failures, fmt.Sprintf("node %s exited on its own at +%.1fs: %s", c.Node, c.At, c.Error))
	}
	for _, f := range faults {
		if whole, ok := f.Extra["clusterWhole"].(bool); ok && !whole {
			r.sum.Failures = append(r.sum.Failures, fmt.Sprintf("fault %s at +%.1fs: the cluster was not whole after healing (every node a voter again): %s", f.Name, f.Start, f.Error))
		}
	}
	ranClean := map[string]bool{}
	for _, f := range faults {
		if f.Error == "" {
			ranClean[f.Name] = true
		} else {
			r.sum.Warnings = append(r.sum.Warnings, fmt.Sprintf("fault %s at +%.1fs: %s", f.Name, f.Start, f.Error))
		}
	}
	for _, n := range r.o.nemeses {
		if _, skipped := r.sum.NemesesSkipped[n]; !skipped && !ranClean[n] {
			r.sum.Failures = append(r.sum.Failures, "nemesis "+n+" never ran without error")
		}
	}
}

// writeReport writes history.jsonl, run.png and summary.json.
func (r *runner) writeReport(history []opRecord, faults []faultRecord, finalStart, finalEnd float64) {
	o := r.o
	if err := writeHistory(filepath.Join(o.out, "history.jsonl"), history); err != nil {
		r.sum.Warnings = append(r.sum.Warnings, err.Error())
	}
	r.sum.Files["history"] = "history.jsonl"
	title := fmt.Sprintf("jepsen-lite %s: %d nodes (%s), %d clients, limit %d/%s: %s",
		o.name, o.nodes, r.mode, o.clients, o.limit, o.window, r.sum.Verdict)
	if err := writePicture(filepath.Join(o.out, "run.png"), history, faults, finalStart, finalEnd, o.timeout, title); err != nil {
		r.sum.Warnings = append(r.sum.Warnings, "picture: "+err.Error())
		r.log.Printf("picture: %v", err)
	} else {
		r.sum.Files["picture"] = "run.png"
	}
	r.writeSummary()
}

// verdictLine is the exit code and the last line of output, from the
// judged summary.
func (r *runner) verdictLine(faults []faultRecord) (int, string) {
	c, a := r.sum.Counts, r.sum.Availability
	detail := fmt.Sprintf("%d ops (%d hits incl. %d multi-key: %d allowed, %d refused, %d unknown, %d failed; %d peeks), %d faults, availability %s overall / %s no-fault / %s during faults, %s, wall %s, out %s",
		c.Ops, c.Hits, c.Multi, c.Allowed, c.Refused, c.UnknownHits, c.FailedHits, c.Peeks, len(faults),
		a.Overall, a.NoFault, a.DuringFaults, convWord(r.sum.Convergence), time.Since(r.t0).Round(time.Second), r.o.out)
	if r.partitions != "run" {
		detail += "; PARTITIONS " + strings.ToUpper(r.partitions)
	}
	if b, ok := strings.CutPrefix(r.sum.Budgets, "skipped: "); ok {
		detail += "; BUDGETS SKIPPED: " + b
	} else if r.sum.Budgets != "" {
		detail += "; " + r.sum.Budgets
	}
	if r.sum.Valid {
		return exitValid, "jepsen-lite: VALID " + detail
	}
	for _, f := range r.sum.Failures {
		r.log.Loudf("FAILED: %s", f)
	}
	return exitInvalid, "jepsen-lite: INVALID " + strings.Join(firstN(r.sum.Failures, 3), "; ") + " -- " + detail
}

func convWord(c convergence) string {
	if c.OK {
		return fmt.Sprintf("converged at index %d", c.Index)
	}
	return "NOT converged"
}

func firstN[T any](s []T, n int) []T {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// writeSummary fills in the run metadata and writes summary.json.
func (r *runner) writeSummary() {
	o := r.o
	r.sum.Run.Name, r.sum.Run.Mode, r.sum.Run.Out = o.name, r.mode, o.out
	r.sum.Run.Started = r.t0.Format(time.RFC3339)
	r.sum.Run.WallSeconds = time.Since(r.t0).Seconds()
	r.sum.Run.Seed = o.seed
	r.sum.Run.Flags = map[string]any{
		"nodes": o.nodes, "clients": o.clients, "keys": o.keys, "limit": o.limit, "window": o.window.String(),
		"duration": o.duration.String(), "faultDuration": o.faultDuration.String(), "quiet": o.quiet.String(),
		"final": o.final.String(), "nemesis": o.nemesis, "rate": o.rate, "peekRatio": o.peekRatio,
		"multiRatio": o.multiRatio, "policies": o.policies,
		"timeout": o.timeout.String(), "skew": o.skew.String(), "checkTimeout": o.checkTimeout.String(),
	}
	r.sum.Partitions = r.partitions
	if r.partitions == "run" {
		n := 0
		for _, f := range r.sum.Faults {
			if isPartition(f.Name) && f.Error == "" {
				n++
			}
		}
		r.sum.Partitions = fmt.Sprintf("run: %d partition faults", n)
		if !slices.ContainsFunc(o.nemeses, isPartition) {
			r.sum.Partitions = "not requested"
		}
	}
	r.sum.PartitionMethod = r.method
	if r.cl != nil {
		r.sum.Run.NodeServeFlags = r.cl.common
		r.sum.Run.Nodes = nil
		for i, s := range r.cl.specs {
			r.cl.mu.Lock()
			starts := r.cl.starts[i]
			r.cl.mu.Unlock()
			r.sum.Run.Nodes = append(r.sum.Run.Nodes, nodeInfo{ID: s.id, HTTP: s.httpAddr, Raft: s.raftAddr, NS: s.ns,
				DataDir: s.dataDir, LogFile: s.logPath, Restarts: starts})
		}
		r.sum.Files["nodeLogs"] = logDir(o.out)
	}
	r.sum.Files["runnerLog"] = "jepsen-lite.log"
	if err := writeJSON(filepath.Join(o.out, "summary.json"), r.sum); err != nil {
		r.log.Printf("%v", err)
	}
}

// leasedFill is the under-admission of leased keys' full windows that
// overlapped one kind of fault ("none": no fault).
type leasedFill struct {
	Fault   string  `json:"fault"`
	Windows int     `json:"windows"`
	Fill    float64 `json:"fill"`
	MinFill float64 `json:"minFill"`
}

// leasedFillByFault groups the leased keys' full windows by the faults
// active during them (a window overlapping several counts for each).
func leasedFillByFault(leased []checker.LeasedResult, faults []faultRecord, t0 time.Time) []leasedFill {
	by := map[string]*leasedFill{}
	var order []string
	add := func(name string, fill float64) {
		f := by[name]
		if f == nil {
			f = &leasedFill{Fault: name, MinFill: 1}
			by[name] = f
			order = append(order, name)
		}
		f.Fill = (f.Fill*float64(f.Windows) + fill) / float64(f.Windows+1)
		f.Windows++
		f.MinFill = min(f.MinFill, fill)
	}
	base := t0.UnixMilli()
	for _, l := range leased {
		for _, w := range l.Windows {
			hit := false
			for _, f := range faults {
				fs, fe := base+int64(f.Start*1000), base+int64(f.End*1000)
				if w.Start < fe && fs < w.End {
					add(f.Name, w.Fill)
					hit = true
				}
			}
			if !hit {
				add("none", w.Fill)
			}
		}
	}
	out := make([]leasedFill, 0, len(order))
	for _, n := range order {
		out = append(out, *by[n])
	}
	return out
}

// clockJumps are the faults that skewed a leader's clock ahead: cluster
// time may jump forward by up to skew while one is applied or healed.
func clockJumps(faults []faultRecord, skew time.Duration) []checker.ClockJump {
	var out []checker.ClockJump
	for _, f := range faults {
		if f.Name == nemClockForward {
			out = append(out, checker.ClockJump{From: int64(f.Start * 1e9), To: int64(f.End*1e9) + int64(time.Second), Ms: skew.Milliseconds()})
		}
	}
	return out
}
