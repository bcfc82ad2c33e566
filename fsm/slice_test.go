package fsm

import (
	"fmt"
	"testing"
	"time"

	"github.com/rlnode/rlnode/policy"
	"github.com/rlnode/rlnode/window"
)

func mirrored(name string, limit int64, w time.Duration) policy.Policy {
	return policy.Policy{Name: name, Algorithm: "fixed_window", Limits: []policy.Limit{lim(limit, w)},
		Consistency: policy.Leased, Scope: policy.Global, Mirrored: true}
}

func (tf *testFSM) slices(term uint64, now int64, items ...SliceItem) *SlicesResult {
	tf.t.Helper()
	r, ok := tf.apply(term, EncodeSlices(now, items)).(*SlicesResult)
	if !ok {
		tf.t.Fatalf("slices entry did not return *SlicesResult (fatal %v)", tf.fatal)
	}
	return r
}

func (tf *testFSM) checkIn(term uint64, now int64, hits ...Hit) *HitsResult {
	tf.t.Helper()
	r, ok := tf.apply(term, AppendHits(nil, now, hits, nil)).(*HitsResult)
	if !ok {
		tf.t.Fatalf("hits did not return *HitsResult (fatal %v)", tf.fatal)
	}
	return r
}

// TestSlicesBoundWhatARegionAllows: a mirrored global policy's hits are
// decided only from slices: never more than their units, never at or
// after their expiry, never in another term than the one that wrote
// them; with no slice the answer is NoSlice (nothing decided) unless the
// parent said the window is spent (a refusal with its Retry-After).
func TestSlicesBoundWhatARegionAllows(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(mirrored("g", 400, 10*time.Second))
	if r := tf.checkIn(1, t0, h2("g", "c", 1)).Hits[0]; !r.NoSlice || r.Counted {
		t.Fatalf("a hit with no slice: %+v, want NoSlice and not counted", r)
	}
	tf.slices(1, t0, SliceItem{Kind: SliceGrant, Policy: "g", Client: "c", Grant: 7, Units: 3, UsableMs: 1000,
		ResetAt: t0 + 9000, WindowStart: t0 - 1000, WindowMs: 10_000})
	for i := 0; i < 3; i++ {
		r := tf.checkIn(1, t0+10, h2("g", "c", 1)).Hits[0]
		if !r.Counted || r.Parts[0].ResetAt != t0+9000 || r.Parts[0].Remaining != int64(2-i) {
			t.Fatalf("hit %d of a 3-unit slice: %+v", i, r)
		}
	}
	if r := tf.checkIn(1, t0+20, h2("g", "c", 1)).Hits[0]; r.Counted || !r.NoSlice {
		t.Fatalf("a 4th hit on a 3-unit slice: %+v", r)
	}
	// Expiry: a slice usable for 1000 ms from its stamp is dead at t0+1000.
	tf.slices(1, t0+30, SliceItem{Kind: SliceGrant, Policy: "g", Client: "c", Grant: 8, Units: 5, UsableMs: 970})
	if r := tf.checkIn(1, t0+999, h2("g", "c", 1)).Hits[0]; !r.Counted {
		t.Fatalf("a hit before the slice's expiry was refused: %+v", r)
	}
	if r := tf.checkIn(1, t0+1000, h2("g", "c", 1)).Hits[0]; r.Counted {
		t.Fatalf("a hit at the slice's expiry was allowed: %+v", r)
	}
	// Term fence: a slice written in term 1 is not spent in term 2.
	tf.slices(1, t0+1001, SliceItem{Kind: SliceGrant, Policy: "g", Client: "c", Grant: 9, Units: 5, UsableMs: 5000})
	if r := tf.checkIn(2, t0+1002, h2("g", "c", 1)).Hits[0]; r.Counted || !r.NoSlice {
		t.Fatalf("a new term spent an inherited slice: %+v", r)
	}
	// Dry: the parent said the window is spent: 429 with its Retry-After.
	tf.slices(2, t0+1003, SliceItem{Kind: SliceDry, Policy: "g", Client: "c", UsableMs: 500, ResetAt: t0 + 9000})
	r := tf.checkIn(2, t0+1100, h2("g", "c", 1)).Hits[0]
	if r.Counted || r.NoSlice || r.Outcome != window.Refused || r.Parts[0].RetryAfterMs != 403 {
		t.Fatalf("a hit in a spent global window: %+v, want refused with retry 403 ms", r)
	}
	if r := tf.checkIn(2, t0+1503, h2("g", "c", 1)).Hits[0]; !r.NoSlice {
		t.Fatalf("after the parent's retry time: %+v, want NoSlice", r)
	}
}

// TestSliceWithdrawAndGroupUndo: a withdrawn slice is spent no more and
// its apply result says how many units go back up; a group that fails
// puts back what its sliced hit spent.
func TestSliceWithdrawAndGroupUndo(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(mirrored("g", 400, 10*time.Second), policy.Policy{Name: "s", Algorithm: "fixed_window", Limits: []policy.Limit{lim(1, time.Minute)}})
	tf.slices(1, t0, SliceItem{Kind: SliceGrant, Policy: "g", Client: "c", Grant: 7, Units: 4, UsableMs: 5000})
	tf.checkIn(1, t0+1, h2("s", "c", 1))
	if r := tf.check(t0+2, []int{2}, h2("g", "c", 1), h2("s", "c", 1)); r.Hits[0].Counted || r.Hits[1].Counted {
		t.Fatalf("a group refused by its strict part counted: %+v", r)
	}
	if w := tf.slices(1, t0+3, SliceItem{Kind: SliceWithdraw, Policy: "g", Client: "c", Grant: 7}).Withdrawn[0]; w != 4 {
		t.Fatalf("withdrew %d units, want all 4 (the failed group's hit put back)", w)
	}
	if r := tf.checkIn(1, t0+4, h2("g", "c", 1)).Hits[0]; r.Counted {
		t.Fatalf("a withdrawn slice was spent: %+v", r)
	}
	if len(tf.fatal) > 0 {
		t.Fatal(tf.fatal)
	}
}

func TestSlicesEntryRoundTripsAndGlobalPolicyNeedsR5(t *testing.T) {
	it := SliceItem{Kind: SliceGrant, Policy: "g", Client: "c", Grant: 1 << 40, Units: 5, UsableMs: 1234, ResetAt: t0, WindowStart: t0 - 5, WindowMs: 10}
	e, err := decodeSlices(EncodeSlices(t0, []SliceItem{it}))
	if err != nil || e.now != t0 || len(e.items) != 1 || e.items[0] != it {
		t.Fatalf("round trip: %+v, %v", e, err)
	}
	bad := EncodeSlices(t0, []SliceItem{{Kind: 9, Policy: "g", Client: "c"}})
	if err := CheckEntry(bad); err == nil {
		t.Fatal("a slice of unknown kind decoded")
	}
	if f := PolicyFormat(mirrored("g", 1, time.Second)); f != FormatR5 {
		t.Fatalf("a mirrored policy needs format %d, want R5", f)
	}
	g := mirrored("g", 1, time.Second)
	g.Mirrored = false
	if f := PolicyFormat(g); f != FormatR5 {
		t.Fatalf("a global policy needs format %d, want R5", f)
	}
	_, ps, err := decodeSetPolicies(EncodeSetPolicies(SetUpsert, []policy.Policy{mirrored("g", 1, time.Second)}))
	if err != nil || !ps[0].Mirrored || !ps[0].IsGlobal() {
		t.Fatalf("policy round trip: %+v %v", ps, err)
	}
}

// TestSliceKeysAreBounded: past MaxSliceKeys keys a hit of a new key
// gets no slice state (NoSlice, nothing decided) and a slice for it is
// ignored; a key the holder retires frees its place.
func TestSliceKeysAreBounded(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(mirrored("g", 400, 10*time.Second))
	var hits []Hit
	for i := range MaxSliceKeys {
		hits = append(hits, h2("g", fmt.Sprint("k", i), 1))
		if len(hits) == 512 {
			tf.checkIn(1, t0, hits...)
			hits = hits[:0]
		}
	}
	if n := len(tf.f.SliceStats()); n != MaxSliceKeys {
		t.Fatalf("%d keys with slice state, want %d", n, MaxSliceKeys)
	}
	tf.slices(1, t0+1, SliceItem{Kind: SliceGrant, Policy: "g", Client: "new", Grant: 1, Units: 5, UsableMs: 1000})
	if r := tf.checkIn(1, t0+2, h2("g", "new", 1)).Hits[0]; !r.NoSlice {
		t.Fatalf("a key past the bound: %+v, want NoSlice", r)
	}
	tf.slices(1, t0+3, SliceItem{Kind: SliceWithdraw, Policy: "g", Client: "k0"})
	tf.slices(1, t0+4, SliceItem{Kind: SliceGrant, Policy: "g", Client: "new", Grant: 2, Units: 5, UsableMs: 1000})
	if r := tf.checkIn(1, t0+5, h2("g", "new", 1)).Hits[0]; !r.Counted {
		t.Fatalf("after a key was retired: %+v, want allowed", r)
	}
}
