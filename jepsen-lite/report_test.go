package main

import (
	"math"
	"testing"
	"time"

	"github.com/rlnode/rlnode/jepsen-lite/checker"
)

// hit builds a hit record from seconds and an outcome.
func hit(inv, ret float64, out checker.Outcome) opRecord {
	var r opRecord
	r.Kind, r.Outcome = checker.KindHit, out
	r.Invoke, r.Return = int64(inv*1e9), int64(ret*1e9)
	if out == checker.OutcomeOK {
		r.ResetAt = 10_000
	}
	return r
}

func share(t *testing.T, a availStat) float64 {
	t.Helper()
	if a.Share == nil {
		t.Fatalf("share is nil for %+v", a)
	}
	return *a.Share
}

func TestAvailability(t *testing.T) {
	faults := []faultRecord{{Name: "kill", Start: 10, End: 14}, {Name: "pause", Start: 20, End: 24}}
	peek := hit(1, 1.1, checker.OutcomeUnknown)
	peek.Kind = checker.KindPeek
	resent := hit(11, 12, checker.OutcomeUnknown)
	resent.Resent = true
	recs := []opRecord{
		hit(1, 1.01, checker.OutcomeOK),        // no fault
		hit(2, 2.01, outcomeFail),              // no fault
		hit(9.5, 10.5, checker.OutcomeUnknown), // overlaps the kill's start
		hit(12, 12.01, outcomeFail),            // inside the kill
		hit(13.9, 14.2, checker.OutcomeOK),     // overlaps the kill's end
		hit(16, 16.01, checker.OutcomeOK),      // between faults
		hit(30, 30.01, checker.OutcomeOK),      // final phase
		hit(31, 31.01, checker.OutcomeUnknown), // final phase
		peek,                                   // peeks never count
		resent,                                 // synthetic re-sends never count
	}
	a := computeAvailability(recs, faults, 29, 35)
	if a.Overall.Total != 8 || a.Overall.Definite != 4 {
		t.Errorf("overall = %+v", a.Overall)
	}
	if a.DuringFaults.Total != 3 || a.DuringFaults.Definite != 1 {
		t.Errorf("during faults = %+v", a.DuringFaults)
	}
	if a.NoFault.Total != 5 || a.NoFault.Definite != 3 {
		t.Errorf("no fault = %+v", a.NoFault)
	}
	if a.FinalPhase.Total != 2 || share(t, a.FinalPhase) != 0.5 {
		t.Errorf("final = %+v", a.FinalPhase)
	}
	if math.Abs(share(t, a.Overall)-0.5) > 1e-9 {
		t.Errorf("overall share = %v", share(t, a.Overall))
	}
	if empty := computeAvailability(nil, faults, 0, 1); empty.Overall.Share != nil || empty.Overall.String() != "n/a" {
		t.Errorf("no hits: %+v", empty.Overall)
	}
}

func TestCountOps(t *testing.T) {
	allowed := hit(1, 2, checker.OutcomeOK)
	allowed.Allowed = true
	refused := hit(1, 2, checker.OutcomeOK)
	failed := hit(1, 2, outcomeFail)
	failed.Code, failed.Status = "not_counted", 503
	unknown := hit(1, 2, checker.OutcomeUnknown)
	unknown.Error = `Get "http://x/check/k0": context deadline exceeded`
	resent := hit(1, 2, checker.OutcomeUnknown)
	resent.Resent = true
	peek := hit(1, 2, checker.OutcomeOK)
	peek.Kind = checker.KindPeek
	c := countOps([]opRecord{allowed, refused, failed, unknown, resent, peek})
	if c.Ops != 5 || c.Hits != 4 || c.Peeks != 1 || c.Allowed != 1 || c.Refused != 1 ||
		c.FailedHits != 1 || c.UnknownHits != 1 || c.Resent != 1 {
		t.Errorf("counts = %+v", c)
	}
	if c.Reasons["hit fail: HTTP 503 not_counted"] != 1 || c.Reasons["hit unknown: timeout"] != 1 {
		t.Errorf("reasons = %v", c.Reasons)
	}
}

func TestCheckerHistoryDropsFailed(t *testing.T) {
	recs := []opRecord{hit(1, 2, checker.OutcomeOK), hit(1, 2, outcomeFail), hit(1, 2, checker.OutcomeUnknown)}
	h := checkerHistory(recs)
	if len(h) != 2 {
		t.Fatalf("got %d ops", len(h))
	}
	for _, op := range h {
		if op.Outcome == outcomeFail {
			t.Errorf("failed op given to the checker: %+v", op)
		}
	}
}

func TestLeasedFillByFault(t *testing.T) {
	t0 := time.UnixMilli(1_700_000_000_000)
	faults := []faultRecord{{Name: nemPause, Start: 10, End: 14}}
	leased := []checker.LeasedResult{{Windows: []checker.LeasedWindow{
		{Start: t0.UnixMilli() + 1000, End: t0.UnixMilli() + 3000, Fill: 1},     // before the pause
		{Start: t0.UnixMilli() + 11000, End: t0.UnixMilli() + 13000, Fill: 0.5}, // during it
		{Start: t0.UnixMilli() + 13000, End: t0.UnixMilli() + 15000, Fill: 0.7}, // overlapping its end
	}}}
	got := leasedFillByFault(leased, faults, t0)
	if len(got) != 2 || got[0].Fault != "none" || got[0].Windows != 1 || got[1].Fault != nemPause || got[1].Windows != 2 ||
		got[1].MinFill != 0.5 || got[1].Fill < 0.599 || got[1].Fill > 0.601 {
		t.Fatalf("fill by fault: %+v", got)
	}
}
