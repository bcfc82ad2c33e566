package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/rlnode/rlnode/jepsen-lite/checker"
)

// availStat is the share of hit ops that got a definite answer.
type availStat struct {
	Share    *float64 `json:"share"` // null when there were no hits
	Definite int      `json:"definite"`
	Total    int      `json:"total"`
}

func (a *availStat) add(definite bool) {
	a.Total++
	if definite {
		a.Definite++
	}
}

func (a *availStat) finish() {
	if a.Total > 0 {
		s := float64(a.Definite) / float64(a.Total)
		a.Share = &s
	}
}

func (a availStat) String() string {
	if a.Share == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", *a.Share*100)
}

// availability splits hits by whether a fault was active while they ran.
// An op counts as "during faults" if its [invoke, return] interval overlaps
// any fault's [start, end] (apply to heal), else as "no fault". The quiet
// gaps right after a heal, when the cluster is still recovering, count as
// no-fault on purpose: recovery time is part of what users see.
type availability struct {
	Overall      availStat `json:"overall"`
	NoFault      availStat `json:"noFault"`
	DuringFaults availStat `json:"duringFaults"`
	FinalPhase   availStat `json:"finalPhase"` // hits invoked in the final quiet phase
}

// computeAvailability is pure: ops, fault intervals and the final phase
// (seconds since start) in, shares out. Synthetic re-sent records are not
// client ops and do not count.
func computeAvailability(recs []opRecord, faults []faultRecord, finalStart, finalEnd float64) availability {
	var a availability
	for _, r := range recs {
		if r.Kind == checker.KindPeek || r.Resent {
			continue
		}
		definite := r.Outcome == checker.OutcomeOK
		a.Overall.add(definite)
		inv, ret := float64(r.Invoke)/1e9, float64(r.Return)/1e9
		faulted := false
		for _, f := range faults {
			if inv <= f.End && ret >= f.Start {
				faulted = true
				break
			}
		}
		if faulted {
			a.DuringFaults.add(definite)
		} else {
			a.NoFault.add(definite)
		}
		if inv >= finalStart && inv < finalEnd {
			a.FinalPhase.add(definite)
		}
	}
	for _, s := range []*availStat{&a.Overall, &a.NoFault, &a.DuringFaults, &a.FinalPhase} {
		s.finish()
	}
	return a
}

// counts are the runner's own tallies (the checker's are over what it was
// given, which excludes failed ops).
type counts struct {
	Ops          int            `json:"ops"`   // client ops, synthetic re-sends excluded
	Hits         int            `json:"hits"`  // multi-key checks included
	Multi        int            `json:"multi"` // multi-key checks (POST /v1/check)
	Peeks        int            `json:"peeks"`
	Allowed      int            `json:"allowed"`
	Refused      int            `json:"refused"`
	UnknownHits  int            `json:"unknownHits"`
	FailedHits   int            `json:"failedHits"`
	UnknownPeeks int            `json:"unknownPeeks"`
	FailedPeeks  int            `json:"failedPeeks"`
	Resent       int            `json:"resent"` // extra unknown hits for transport re-sends
	Reasons      map[string]int `json:"reasons"`
}

func countOps(recs []opRecord) counts {
	c := counts{Reasons: map[string]int{}}
	for _, r := range recs {
		if r.Resent {
			c.Resent++
			continue
		}
		c.Ops++
		hit := r.Kind != checker.KindPeek
		if r.Kind == checker.KindMulti {
			c.Multi++
		}
		if hit {
			c.Hits++
		} else {
			c.Peeks++
		}
		switch {
		case r.Outcome == checker.OutcomeOK && hit && r.Allowed:
			c.Allowed++
		case r.Outcome == checker.OutcomeOK && hit:
			c.Refused++
		case r.Outcome == checker.OutcomeOK:
		case r.Outcome == outcomeFail && hit:
			c.FailedHits++
		case r.Outcome == outcomeFail:
			c.FailedPeeks++
		case hit:
			c.UnknownHits++
		default:
			c.UnknownPeeks++
		}
		if r.Outcome != checker.OutcomeOK {
			c.Reasons[string(r.Kind)+" "+string(r.Outcome)+": "+reasonClass(r)]++
		}
	}
	return c
}

// reasonClass buckets an error for the summary.
func reasonClass(r opRecord) string {
	if r.Code != "" {
		return fmt.Sprintf("HTTP %d %s", r.Status, r.Code)
	}
	e := r.Error
	switch {
	case r.Status != 0 && strings.HasPrefix(e, "malformed"):
		return fmt.Sprintf("HTTP %d malformed body", r.Status)
	case r.Status != 0 && !strings.Contains(e, "HTTP"):
		return fmt.Sprintf("HTTP %d, body read failed", r.Status)
	case r.Status != 0:
		return fmt.Sprintf("HTTP %d", r.Status)
	case strings.Contains(e, "connection refused"):
		return "connection refused"
	case strings.Contains(e, "deadline exceeded") || strings.Contains(e, "Timeout"):
		return "timeout"
	case strings.Contains(e, "connection reset"):
		return "connection reset"
	case strings.Contains(e, "EOF"):
		return "connection closed (EOF)"
	case strings.Contains(e, "no route to host"):
		return "no route to host"
	default:
		return "other"
	}
}

// summary is summary.json.
type summary struct {
	Valid            bool                      `json:"valid"`
	Verdict          string                    `json:"verdict"`
	Failures         []string                  `json:"failures"`
	Warnings         []string                  `json:"warnings"`
	Run              runInfo                   `json:"run"`
	Partitions       string                    `json:"partitions"`
	Budgets          string                    `json:"budgets,omitempty"` // the permits and reservations workload, or why it was skipped
	PerCall          string                    `json:"perCall,omitempty"` // the per-call (gubernator API) workload, or why it was skipped
	PartitionMethod  string                    `json:"partitionMethod,omitempty"`
	NemesesRequested []string                  `json:"nemesesRequested"`
	NemesesSkipped   map[string]string         `json:"nemesesSkipped,omitempty"`
	Faults           []faultRecord             `json:"faults"`
	Counts           counts                    `json:"counts"`
	Availability     availability              `json:"availability"`
	LeasedFill       []leasedFill              `json:"leasedFill,omitempty"` // leased keys' under-admission by fault
	Policies         map[string]checker.Policy `json:"policies,omitempty"`   // every version the checker judged against
	Checker          checkerSummary            `json:"checker"`
	Violations       []checker.Violation       `json:"violations"`
	Convergence      convergence               `json:"convergence"`
	Crashes          []crash                   `json:"crashes"`
	Files            map[string]any            `json:"files"`
}

type checkerSummary struct {
	Valid  bool                   `json:"valid"`
	Keys   []checker.KeyResult    `json:"keys"`
	Counts any                    `json:"counts"`
	Leased []checker.LeasedResult `json:"leased,omitempty"`
}

type runInfo struct {
	Name           string         `json:"name"`
	Mode           string         `json:"mode"` // "netns" or "loopback"
	Out            string         `json:"out"`
	Started        string         `json:"started"`
	WallSeconds    float64        `json:"wallSeconds"`
	Duration       string         `json:"duration"` // faulted phase as run
	DurationNote   string         `json:"durationNote,omitempty"`
	FinalPhase     [2]float64     `json:"finalPhase"` // seconds since start
	Seed           uint64         `json:"seed"`
	Flags          map[string]any `json:"flags"`
	NodeServeFlags []string       `json:"nodeServeFlags"`
	Nodes          []nodeInfo     `json:"nodes"`
}

type nodeInfo struct {
	ID       string `json:"id"`
	HTTP     string `json:"http"`
	Raft     string `json:"raft"`
	NS       string `json:"netns,omitempty"`
	DataDir  string `json:"dataDir"`
	LogFile  string `json:"log"`
	Restarts int    `json:"starts"`
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", filepath.Base(path), err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// writeHistory writes one record per line.
func writeHistory[T any](path string, recs []T) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create history: %w", err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			f.Close()
			return fmt.Errorf("write history: %w", err)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write history: %w", err)
	}
	return f.Close()
}
