package checker

import (
	"testing"
)

// Leased keys: handcrafted histories. Times: run start is t0 (Unix ms),
// op times are ns since then.
const ms = int64(1e6)

var leasedCfg = Config{StartUnixMs: t0, Policies: map[string]Policy{
	"lf": {Algorithm: FixedWindow, Leased: true, Versions: [][]Limit{{{Limit: 3, WindowMs: 1000}}}},
	"ls": {Algorithm: SlidingWindow, Leased: true, Versions: [][]Limit{{{Limit: 3, WindowMs: 1000}}}},
	"lb": {Algorithm: TokenBucket, Leased: true, Versions: [][]Limit{{{Limit: 4, WindowMs: 1000, Burst: 2}}}},
}}

// leasedHit is a definite answer on a leased key, invoked at invMs after
// the run start, decided locally, of the window starting at start.
func leasedHit(h history, pol string, allowed bool, invMs, start int64) history {
	w := int64(1000)
	op := Op{Kind: KindHit, Key: pol + "/k", Policy: pol, Invoke: invMs * ms, Return: invMs*ms + ms, Outcome: OutcomeOK,
		Allowed: allowed, Decided: "local", Limits: []LimitResult{{Limit: 3, WindowMs: w, WindowStart: start, ResetAt: start + w}}}
	if pol == "lb" {
		op.Limits = []LimitResult{{Limit: 2, WindowMs: 1000, ResetAt: t0 + invMs}}
	} else {
		op.ResetAt = start + w
	}
	return h.add(op)
}

func checkLeasedHistory(t *testing.T, h history) Result {
	t.Helper()
	return Check(leasedCfg, h)
}

func hasViolation(res Result, check string) bool {
	for _, v := range res.Violations {
		if v.Check == check {
			return true
		}
	}
	return false
}

func TestLeasedValidHistoryPasses(t *testing.T) {
	var h history
	for i := range int64(3) {
		h = leasedHit(h, "lf", true, 10+i, t0)
		h = leasedHit(h, "ls", true, 10+i, t0)
	}
	h = leasedHit(h, "lf", false, 20, t0)
	for i := range int64(3) { // the next window: three more
		h = leasedHit(h, "lf", true, 1000+i, t0+1000)
	}
	h = leasedHit(h, "lb", true, 0, 0)
	h = leasedHit(h, "lb", true, 1, 0)
	h = leasedHit(h, "lb", true, 260, 0) // a token every 250 ms
	res := checkLeasedHistory(t, h)
	if !res.Valid {
		t.Fatalf("valid leased history rejected: %+v", res.Violations)
	}
	if len(res.Leased) != 3 || res.Leased[1].Key != "lf/k" || res.Leased[1].Allowed != 6 || res.Leased[1].FullWindows != 1 || res.Leased[1].Fill != 1 {
		t.Fatalf("leased results %+v", res.Leased)
	}
}

// TestLeasedOverAdmissionFails: a fourth allowed hit in a window of 3
// (say, two holders spending the same units) is a violation.
func TestLeasedOverAdmissionFails(t *testing.T) {
	for _, pol := range []string{"lf", "ls"} {
		var h history
		for i := range int64(4) {
			h = leasedHit(h, pol, true, 10+i, t0)
		}
		if res := checkLeasedHistory(t, h); res.Valid || !hasViolation(res, CheckLeasedOverLimit) {
			t.Fatalf("%s: 4 allowed of 3 passed: %+v", pol, res.Violations)
		}
	}
	var h history
	for i := range int64(3) { // burst 2, refill 1 per 250 ms: 3 at once is one too many
		h = leasedHit(h, "lb", true, 100+i, 0)
	}
	if res := checkLeasedHistory(t, h); res.Valid || !hasViolation(res, CheckLeasedOverLimit) {
		t.Fatalf("token bucket over its burst passed: %+v", res.Violations)
	}
}

// TestLeasedSpendAfterLeaseExpiredFails: a holder paused past its lease
// wakes and spends a unit of a window that ended before the check was
// even sent: the window's count stays within the limit, but the spend is
// late, and the checker catches it.
func TestLeasedSpendAfterLeaseExpiredFails(t *testing.T) {
	var h history
	h = leasedHit(h, "lf", true, 10, t0)
	h = leasedHit(h, "lf", true, 11, t0)
	h = leasedHit(h, "lf", true, 3000, t0) // invoked 2 s after the window [t0, t0+1000) ended
	res := checkLeasedHistory(t, h)
	if res.Valid || !hasViolation(res, CheckLeasedLate) || hasViolation(res, CheckLeasedOverLimit) {
		t.Fatalf("a spend after the window ended: %+v", res.Violations)
	}
	// Without the run's start time the late check cannot run.
	cfg := leasedCfg
	cfg.StartUnixMs = 0
	if res := Check(cfg, h); !res.Valid {
		t.Fatalf("late check ran without a start time: %+v", res.Violations)
	}
}

func TestLeasedKeyInMultiIsMalformed(t *testing.T) {
	var h history
	h = h.add(Op{Kind: KindMulti, Key: "lf/k", Invoke: 1, Return: 2, Outcome: OutcomeOK, Allowed: true,
		Parts: []Part{{Key: "lf/k", Policy: "lf", Allowed: true, ResetAt: t0 + 1000}}})
	if res := checkLeasedHistory(t, h); res.Valid || !hasViolation(res, CheckLeasedMulti) {
		t.Fatalf("leased key in a multi-key check: %+v", res.Violations)
	}
}

// TestLeasedBucketAllowsAClockJump: a fault that moves cluster time ahead
// refills a bucket by that much (for strict keys too); a span overlapping
// it is judged with that refill, other spans are not.
func TestLeasedBucketAllowsAClockJump(t *testing.T) {
	var h history
	for i := range int64(3) {
		h = leasedHit(h, "lb", true, 100+i, 0)
	}
	cfg := leasedCfg
	cfg.ClockJumps = []ClockJump{{From: 90 * ms, To: 200 * ms, Ms: 5000}}
	if res := Check(cfg, h); !res.Valid {
		t.Fatalf("3 tokens across a 5 s clock jump: %+v", res.Violations)
	}
	cfg.ClockJumps = []ClockJump{{From: 500 * ms, To: 600 * ms, Ms: 5000}}
	if res := Check(cfg, h); res.Valid {
		t.Fatal("a clock jump elsewhere excused 3 tokens at once")
	}
}

// A local decision of a window after an answer had shown the cluster's time
// past that window's end is spent late in cluster time, whatever the
// runner's clock says (issue 34: cluster time jumped ahead at a failover).
func TestLeasedSpentAfterWindowInClusterTime(t *testing.T) {
	var h history
	h = leasedHit(h, "lf", true, 10, t0-500) // window [t0-500, t0+500)
	// A hit of the next window returns at 101 ms: cluster time reached
	// t0+500 by then, though the runner's clock says t0+101.
	h = leasedHit(h, "lf", true, 100, t0+500)
	h = leasedHit(h, "lf", true, 200, t0-500) // the old window, spent late
	cfg := leasedCfg
	cfg.StartUnixMs = 0 // no real-time judgment: cluster time alone
	if res := Check(cfg, h); !hasViolation(res, CheckLeasedLateCluster) {
		t.Fatalf("a unit spent after its window ended in cluster time was not caught: %+v", res.Violations)
	}
	h = history{}
	h = leasedHit(h, "lf", true, 10, t0-500)
	h = leasedHit(h, "lf", true, 100, t0-500)
	if res := Check(cfg, h); hasViolation(res, CheckLeasedLateCluster) {
		t.Fatalf("in-window spends judged late: %+v", res.Violations)
	}
}
