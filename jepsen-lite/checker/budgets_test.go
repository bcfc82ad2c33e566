package checker

import (
	"slices"
	"testing"
)

const nsMs = int64(1_000_000) // one ms in ns

func TestCheckPermitsFindsOverlapAboveTheLimit(t *testing.T) {
	ok := []PermitOp{
		{ID: 1, Key: "p", Invoke: 0, Return: 10 * nsMs, Outcome: OutcomeOK, Acquired: true, TTLMs: 10_000, ReleaseInvoke: 100 * nsMs},
		{ID: 2, Key: "p", Invoke: 0, Return: 20 * nsMs, Outcome: OutcomeOK, Acquired: true, TTLMs: 10_000, ReleaseInvoke: 150 * nsMs},
		// Starts as 1 is released: touching is not overlap.
		{ID: 3, Key: "p", Invoke: 90 * nsMs, Return: 100 * nsMs, Outcome: OutcomeOK, Acquired: true, TTLMs: 10_000, ReleaseInvoke: 200 * nsMs},
		// Unknown: possibly live, never counted against the limit.
		{ID: 4, Key: "p", Invoke: 30 * nsMs, Return: 40 * nsMs, Outcome: OutcomeUnknown, TTLMs: 10_000},
		// Left to its TTL: live until TTL - slack only.
		{ID: 5, Key: "q", Invoke: 0, Return: 1 * nsMs, Outcome: OutcomeOK, Acquired: true, TTLMs: 1000},
		{ID: 6, Key: "q", Invoke: 0, Return: 1 * nsMs, Outcome: OutcomeOK, Acquired: true, TTLMs: 1000},
		{ID: 7, Key: "q", Invoke: 900 * nsMs, Return: 950 * nsMs, Outcome: OutcomeOK, Acquired: true, TTLMs: 1000},
	}
	if v := CheckPermits(ok, 2, 100); len(v) != 0 {
		t.Fatalf("valid history: %+v", v)
	}
	// Without the slack, 5 and 6 are still live when 7 is answered.
	if v := CheckPermits(ok, 2, 0); len(v) != 1 || v[0].Key != "q" {
		t.Fatalf("q with no slack: %+v", v)
	}
	bad := append(ok, PermitOp{ID: 8, Key: "p", Invoke: 50 * nsMs, Return: 60 * nsMs, Outcome: OutcomeOK, Acquired: true, TTLMs: 10_000, ReleaseInvoke: 70 * nsMs})
	if v := CheckPermits(bad, 2, 100); len(v) != 1 || v[0].Check != CheckPermitsOverLimit || len(v[0].OpIDs) != 3 {
		t.Fatalf("three live of 2: %+v", v)
	}
}

// TestCheckPermitsAFailedReleaseLeavesThePermitLive: a release that
// certainly had no effect (503 not counted) does not end the permit; it
// stays live until its TTL, so a third permit answered meanwhile is over
// a limit of 2. A release whose outcome is unknown may have applied.
func TestCheckPermitsAFailedReleaseLeavesThePermitLive(t *testing.T) {
	ops := []PermitOp{
		{ID: 1, Key: "p", Invoke: 0, Return: 10 * nsMs, Outcome: OutcomeOK, Acquired: true, TTLMs: 10_000, ReleaseInvoke: 100 * nsMs, ReleaseOutcome: "fail"},
		{ID: 2, Key: "p", Invoke: 0, Return: 20 * nsMs, Outcome: OutcomeOK, Acquired: true, TTLMs: 10_000},
		{ID: 3, Key: "p", Invoke: 150 * nsMs, Return: 160 * nsMs, Outcome: OutcomeOK, Acquired: true, TTLMs: 10_000},
	}
	if v := CheckPermits(ops, 2, 100); len(v) != 1 || !slices.Equal(v[0].OpIDs, []int{1, 2, 3}) {
		t.Fatalf("a failed release ended the permit: %+v", v)
	}
	for _, o := range []Outcome{OutcomeOK, OutcomeUnknown, SettleNotFound} {
		ops[0].ReleaseOutcome = o
		if v := CheckPermits(ops, 2, 100); len(v) != 0 {
			t.Fatalf("release %s may have applied: %+v", o, v)
		}
	}
}

func TestCheckReservationsAfterSettles(t *testing.T) {
	ops := []ReservationOp{
		{ID: 1, Key: "r", Units: 8, Outcome: OutcomeOK, Reserved: true, ResetAt: 1000, Actual: 2, SettleOutcome: OutcomeOK},
		{ID: 2, Key: "r", Units: 8, Outcome: OutcomeOK, Reserved: true, ResetAt: 1000, Actual: 3, SettleOutcome: OutcomeUnknown},
		{ID: 3, Key: "r", Units: 5, Outcome: OutcomeOK, Reserved: true, ResetAt: 1000, Actual: -1},
		{ID: 4, Key: "r", Units: 9, Outcome: OutcomeUnknown},
		{ID: 5, Key: "r", Units: 9, Outcome: OutcomeOK, Reserved: true, ResetAt: 2000, Actual: 0, SettleOutcome: SettleNotFound},
	}
	if v := CheckReservations(ops, 10); len(v) != 0 {
		t.Fatalf("valid history: %+v", v)
	}
	// A settle that failed for certain leaves the full 8 charged: 8+3+5.
	ops[0].SettleOutcome = "fail"
	if v := CheckReservations(ops, 10); len(v) != 1 || v[0].Check != CheckReservationsOverLimit {
		t.Fatalf("16 of 10: %+v", v)
	}
}
