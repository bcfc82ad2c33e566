package main

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/rlnode/rlnode/jepsen-lite/checker"
)

// The multi-cluster mode's report: the verdict, summary.json and
// history.jsonl, from the check (regioncheck.go) and the processes.

// judge checks the hits and the processes, writes the report and words
// the verdict.
func (r *regionRunner) judge(hits []regionRecord, faults []faultRecord) (int, string) {
	o := r.o
	res := checkGlobal(hits, r.checkConfig())
	r.rsum.Global = res
	r.rsum.Violations = res.Violations
	byCheck := map[string]int{}
	for _, v := range res.Violations {
		byCheck[v.Check]++
	}
	var checks []string
	for c := range byCheck {
		checks = append(checks, c)
	}
	sort.Strings(checks)
	for _, c := range checks {
		first := ""
		for _, v := range res.Violations {
			if v.Check == c {
				first = v.Detail
				break
			}
		}
		r.rsum.Failures = append(r.rsum.Failures, fmt.Sprintf("%s: %d violation(s), first: %s", c, byCheck[c], first))
	}
	for _, cl := range r.clusters() {
		r.rsum.Crashes = append(r.rsum.Crashes, cl.crashList()...)
	}
	for _, c := range r.rsum.Crashes {
		r.rsum.Failures = append(r.rsum.Failures, fmt.Sprintf("node %s exited on its own: %s (see %s)", c.Node, c.Error, c.Log))
	}
	ran := map[string]bool{}
	for _, f := range faults {
		ran[f.Name] = ran[f.Name] || f.Error == ""
	}
	for _, n := range o.nemeses {
		if !ran[n] {
			r.rsum.Failures = append(r.rsum.Failures, "nemesis "+n+" never ran without error")
		}
	}
	r.rsum.Counts, r.rsum.Availability = regionCounts(hits, faults, r.t0)
	r.rsum.Holders = holdersSummary(r.tgts, r.rsum.Counts)
	r.rsum.Valid = len(r.rsum.Failures) == 0
	r.rsum.Verdict = map[bool]string{true: "VALID", false: "INVALID"}[r.rsum.Valid]
	if err := writeHistory(filepath.Join(o.out, "history.jsonl"), hits); err != nil {
		r.rsum.Warnings = append(r.rsum.Warnings, err.Error())
	}
	r.writeRegionSummary()

	c := r.rsum.Counts
	detail := fmt.Sprintf("%d hits (%d allowed, %d refused, %d unknown, %d failed: %d of them 503 parent_unreachable), %d global windows, max %d allowed in one of limit %d (possible incl. unknowns: %d), admission %s (lowest window %s), shares %s, %s, %d faults, availability %s, %s, wall %s, out %s; app holders %s",
		c["hits"], c["allowed"], c["refused"], c["unknown"], c["failed"], c["parentUnreachable"], len(res.Windows), maxAllowed(res), o.globalLimit, res.MaxPossible,
		pct(res.Admission), pct(res.MinAdmission), shares(res.RegionShare), bucketWord(res.Bucket), len(faults), r.rsum.Availability["overall"],
		convergedWord(r.rsum.Convergence), time.Since(r.t0).Round(time.Second), o.out, r.rsum.Holders)
	if r.rsum.Valid {
		return exitValid, "jepsen-lite: VALID (regions) " + detail
	}
	for _, f := range r.rsum.Failures {
		r.log.Loudf("FAILED: %s", f)
	}
	return exitInvalid, "jepsen-lite: INVALID (regions) " + strings.Join(firstN(r.rsum.Failures, 3), "; ") + " -- " + detail
}

func bucketWord(b *bucketStat) string {
	if b == nil {
		return "no token bucket"
	}
	return fmt.Sprintf("token bucket %d allowed of %d hits (%.1f%% of burst + refill)", b.Allowed, b.Hits, b.Fill*100)
}

func maxAllowed(res globalResult) int64 {
	var m int64
	for _, w := range res.Windows {
		m = max(m, w.Allowed)
	}
	return m
}

func pct(f *float64) string {
	if f == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", *f*100)
}

func shares(by map[string]float64) string {
	var names []string
	for n := range by {
		names = append(names, n)
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %.0f%%", n, by[n]*100))
	}
	if len(parts) == 0 {
		return "n/a"
	}
	return strings.Join(parts, " / ")
}

func convergedWord(conv map[string]any) string {
	for _, c := range conv {
		if cv, ok := c.(convergence); ok && !cv.OK {
			return "NOT converged"
		}
	}
	return fmt.Sprintf("%d clusters converged", len(conv))
}

// regionCounts counts the hits by outcome, and availability (a definite
// answer: 200 or 429) overall, with no fault active and during faults.
func regionCounts(hits []regionRecord, faults []faultRecord, t0 time.Time) (map[string]int, map[string]string) {
	c := map[string]int{}
	var all, quiet, faulted availStat
	for _, h := range hits {
		if h.Resent {
			continue
		}
		c["hits"]++
		c["hits:"+h.Region]++
		switch {
		case h.Outcome == checker.OutcomeOK && h.Allowed:
			c["allowed"]++
			c["allowed:"+h.Region]++
		case h.Outcome == checker.OutcomeOK:
			c["refused"]++
		case h.Outcome == checker.OutcomeUnknown:
			c["unknown"]++
		default:
			c["failed"]++
		}
		if h.Code == "parent_unreachable" {
			c["parentUnreachable"]++
		}
		if h.fromHolder() {
			c["holderHits"]++
			allowed := h.Outcome == checker.OutcomeOK && h.Allowed
			if allowed {
				c["holderAllowed"]++
			}
			if h.Decided == decidedLocal {
				c["holderLocal"]++
				if allowed {
					c["holderLocalAllowed"]++
				}
			}
		}
		definite := h.Outcome == checker.OutcomeOK
		all.add(definite)
		s, e := time.Unix(0, h.Sent).Sub(t0).Seconds(), time.Unix(0, h.Recv).Sub(t0).Seconds()
		during := false
		for _, f := range faults {
			during = during || s <= f.End && e >= f.Start
		}
		if during {
			faulted.add(definite)
		} else {
			quiet.add(definite)
		}
	}
	all.finish()
	quiet.finish()
	faulted.finish()
	return c, map[string]string{"overall": all.String(), "noFault": quiet.String(), "duringFaults": faulted.String()}
}

// writeRegionSummary fills in the run and writes summary.json.
func (r *regionRunner) writeRegionSummary() {
	o := r.o
	r.rsum.Run = map[string]any{"name": o.name, "mode": "regions (loopback)", "out": o.out, "started": r.t0.Format(time.RFC3339),
		"wallSeconds": time.Since(r.t0).Seconds(), "seed": o.seed,
		"flags": map[string]any{"regionDelays": o.regionDelays, "globalLimit": o.globalLimit, "globalWindow": o.globalWindow.String(),
			"demand": o.demand, "split": o.split, "parentShare": o.parentShare, "regionKeys": o.regionKeys, "demandPeriod": o.demandPeriod.String(),
			"brokenRegion": o.brokenRegion, "faultRegion": o.faultRegion, "duration": o.duration.String(), "faultDuration": o.faultDuration.String(),
			"quiet": o.quiet.String(), "final": o.final.String(), "nemesis": o.nemesis, "timeout": o.timeout.String()}}
	r.rsum.Nodes = nil
	for _, cl := range r.clusters() {
		for i, s := range cl.specs {
			cl.mu.Lock()
			starts := cl.starts[i]
			cl.mu.Unlock()
			r.rsum.Nodes = append(r.rsum.Nodes, nodeInfo{ID: s.id, HTTP: s.httpAddr, Raft: s.raftAddr, DataDir: s.dataDir, LogFile: s.logPath, Restarts: starts})
		}
	}
	if err := writeJSON(filepath.Join(o.out, "summary.json"), r.rsum); err != nil {
		r.log.Printf("%v", err)
	}
}
