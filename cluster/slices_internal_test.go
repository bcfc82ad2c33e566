package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/policy"
)

// sliceBench is the slices' node without a cluster: the budgets' bench
// (a real state machine, a hand-moved clock) as leader or not.
type sliceBench struct {
	*budgetBench
	leader bool
}

func (s sliceBench) IsLeader() bool                      { return s.leader }
func (s sliceBench) stampNow(bool) (int64, error)        { return s.now, nil }
func (s sliceBench) write(data []byte) (any, error)      { return s.apply(data), nil }
func (s sliceBench) RequireFormat(need fsm.Format) error { return nil }

// TestSlicesWithoutACluster: a grant with time left is written with what
// is left of its deadline less the margin, and held; one whose deadline
// has passed is not written (-1: give it back); a withdraw reports what
// it took out; a follower writes nothing.
func TestSlicesWithoutACluster(t *testing.T) {
	bench := &budgetBench{f: fsm.New(fsm.Config{OnFatal: func(err error) { t.Errorf("fsm halted: %v", err) }}), now: 1_700_000_000_000}
	g := policy.Policy{Name: "g", Algorithm: "fixed_window", Limits: []policy.Limit{{Limit: 400, Window: policy.Duration(10 * time.Second)}},
		Consistency: policy.Leased, Scope: policy.Global, Mirrored: true}
	if res := bench.apply(fsm.EncodeSetPolicies(fsm.SetUpsert, []policy.Policy{g})); res != nil {
		if err, ok := res.(error); ok {
			t.Fatal(err)
		}
	}
	s := &Slices{log: sliceBench{bench, true}, state: bench.f}
	grant := func(id uint64, units int64) fsm.SliceItem {
		return fsm.SliceItem{Kind: fsm.SliceGrant, Policy: "g", Client: "c", Grant: id, Units: units,
			ResetAt: bench.now + 9000, WindowStart: bench.now - 1000, WindowMs: 10_000}
	}
	now := time.Now()
	out, err := s.WriteSlices([]SliceWrite{{Item: grant(7, 3), Deadline: now.Add(5 * time.Second)}, {Item: grant(8, 2), Deadline: now.Add(-time.Second)}})
	if err != nil || len(out) != 2 || out[0] != 0 || out[1] != -1 {
		t.Fatalf("write: %v %v, want [0 -1]", out, err)
	}
	stats := s.SliceStats()
	if len(stats) != 1 || stats[0].Held != 3 || len(stats[0].Grants) != 1 || stats[0].Grants[0].Grant != 7 {
		t.Fatalf("stats %+v, want grant 7 holding 3", stats)
	}
	if exp := stats[0].Grants[0].Exp - bench.now; exp > 5000 || exp < 4900 {
		t.Fatalf("the slice is usable %d ms, want what was left of 5 s less the margin", exp)
	}
	out, err = s.WriteSlices([]SliceWrite{{Item: fsm.SliceItem{Kind: fsm.SliceWithdraw, Policy: "g", Client: "c", Grant: 7}}})
	if err != nil || out[0] != 3 {
		t.Fatalf("withdraw: %v %v, want 3 taken out", out, err)
	}
	follower := &Slices{log: sliceBench{bench, false}, state: bench.f}
	if _, err := follower.WriteSlices([]SliceWrite{{Item: grant(9, 1), Deadline: now.Add(time.Second)}}); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("a follower's write: %v, want ErrNotLeader", err)
	}
}

// TestSubleaseThroughTheLeases: a grant of a mirrored policy is a
// sub-lease of the region's slices through the ordinary lease path:
// with no slice it fails not counted with ErrParentUnreachable (never a
// 0-unit refusal), with one it lends from it until the slice's expiry,
// naming the slice's global window.
func TestSubleaseThroughTheLeases(t *testing.T) {
	g := policy.Policy{Name: "g", Algorithm: "fixed_window", Limits: []policy.Limit{{Limit: 400, Window: policy.Duration(10 * time.Second)}},
		Consistency: policy.Leased, Scope: policy.Global, Mirrored: true}
	l, bench := testLeases(t, g)
	ctx := context.Background()
	_, err := l.Grant(ctx, GrantRequest{Policy: "g", Client: "c", Holder: "app-1", Want: 5, Lease: 2 * time.Second})
	if !errors.Is(err, ErrParentUnreachable) || !errors.Is(err, ErrNotCounted) {
		t.Fatalf("sub-lease with no slice: %v, want ErrParentUnreachable, not counted", err)
	}
	gs, err := l.Grants(ctx, "node-2", time.Second, []GrantItem{{Policy: "g", Client: "c", Want: 5}})
	if err != nil || gs[0].ID != 0 || gs[0].Units != 0 || !gs[0].NoSlice {
		t.Fatalf("a node's sub-lease with no slice: %+v %v, want NoSlice with ID 0 (the node backs off)", gs, err)
	}
	bench.apply(fsm.EncodeSlices(bench.now, []fsm.SliceItem{{Kind: fsm.SliceGrant, Policy: "g", Client: "c", Grant: 7, Units: 10,
		UsableMs: 700, ResetAt: bench.now + 9000, WindowStart: bench.now - 1000, WindowMs: 10_000}}))
	sub, err := l.Grant(ctx, GrantRequest{Policy: "g", Client: "c", Holder: "app-1", Want: 4, Lease: 2 * time.Second})
	if err != nil || sub.Units != 4 || sub.Valid != 700*time.Millisecond || sub.UsableFor >= sub.Valid ||
		sub.ResetAt != bench.now+9000 || sub.WindowStart != bench.now-1000 || sub.Remaining != 6 {
		t.Fatalf("sub-lease of a 10-unit slice usable 700 ms: %+v %v", sub, err)
	}
}
