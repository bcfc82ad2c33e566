package fsm

import (
	"bytes"
	"fmt"
	"io"
	"testing"
	"time"
)

func (tf *testFSM) grantIn(term uint64, now int64, holder string, leaseMs int64, items ...GrantItem) GrantResult {
	tf.t.Helper()
	r, ok := tf.apply(term, EncodeGrant(now, holder, leaseMs, items)).(*GrantsResult)
	if !ok {
		tf.t.Fatalf("grant did not return *GrantsResult (fatal %v)", tf.fatal)
	}
	return r.Grants[0]
}

func (tf *testFSM) giveBackIn(term uint64, now int64, holder string, it ReturnItem) int64 {
	tf.t.Helper()
	r, ok := tf.apply(term, EncodeReturn(now, holder, []ReturnItem{it})).(*ReturnsResult)
	if !ok {
		tf.t.Fatalf("return did not return *ReturnsResult (fatal %v)", tf.fatal)
	}
	return r.Returned[0]
}

// slice is a grant item of parent grant id with units, usable for
// usableMs from the entry's stamp, in the global window ending at
// resetAt.
func sliceOf(id uint64, units, usableMs, resetAt int64) SliceItem {
	return SliceItem{Kind: SliceGrant, Policy: "g", Client: "c", Grant: id, Units: units, UsableMs: usableMs,
		ResetAt: resetAt, WindowStart: resetAt - 10_000, WindowMs: 10_000}
}

// allowedNow counts the strict hits of cost 1 the key allows at now in
// term, up to limit (each its own entry).
func (tf *testFSM) allowedNow(term uint64, now int64, limit int) int {
	tf.t.Helper()
	n := 0
	for ; n < limit; n++ {
		if r := tf.checkIn(term, now, h2("g", "c", 1)).Hits[0]; !r.Counted {
			break
		}
	}
	return n
}

// TestSubleaseTakesItsUnitsOutOfTheSlices: a grant of a mirrored key
// takes its units out of the live slices when it applies (strict hits
// and withdrawals see only what is left; the holder's demand counts
// them), ends at its slice's expiry, not its own lease, and carries the
// slice's global window.
func TestSubleaseTakesItsUnitsOutOfTheSlices(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(mirrored("g", 400, 10*time.Second))
	tf.slices(1, t0, sliceOf(7, 10, 1000, t0+9000))
	g := tf.grantIn(1, t0+10, "n1", 2000, GrantItem{Policy: "g", Client: "c", Want: 4})
	if g.Units != 4 || g.Index == 0 || g.NoSlice || g.NotLeased {
		t.Fatalf("sub-lease of a 10-unit slice: %+v, want 4 units", g)
	}
	if g.Exp != t0+1000 {
		t.Fatalf("sub-lease ends at %d, want the slice's expiry %d (not the grant's own lease)", g.Exp-t0, 1000)
	}
	if p := g.Parts[0]; p.ResetAt != t0+9000 || p.WindowStart != t0-1000 || p.Remaining != 6 || p.Limit != 400 {
		t.Fatalf("sub-lease's window %+v, want the slice's global window and 6 left", p)
	}
	if n := tf.allowedNow(1, t0+20, 20); n != 6 {
		t.Fatalf("strict hits allowed %d after a 4-unit sub-lease of 10, want 6", n)
	}
	if st := tf.f.SliceStats()[0]; st.Spent != 10 {
		t.Fatalf("slice state spent %d, want 10 (the sub-lease's units are demand too)", st.Spent)
	}
	if w := tf.slices(1, t0+30, SliceItem{Kind: SliceWithdraw, Policy: "g", Client: "c", Grant: 7}).Withdrawn[0]; w != 0 {
		t.Fatalf("withdrew %d units of a slice lent and spent out, want 0", w)
	}
	if len(tf.fatal) > 0 {
		t.Fatal(tf.fatal)
	}
}

// TestSubleaseEndsWithTheEarliestSliceItTookFrom: a grant spanning two
// slices ends with the earlier one; a grant is never lent more than the
// live slices hold, and only from slices of one global window.
func TestSubleaseEndsWithTheEarliestSliceItTookFrom(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(mirrored("g", 400, 10*time.Second))
	tf.slices(1, t0, sliceOf(7, 3, 500, t0+9000), sliceOf(8, 10, 1500, t0+9000))
	g := tf.grantIn(1, t0+10, "n1", 2000, GrantItem{Policy: "g", Client: "c", Want: 5})
	if g.Units != 5 || g.Exp != t0+500 {
		t.Fatalf("sub-lease over two slices: %d units until %d, want 5 until 500", g.Units, g.Exp-t0)
	}
	g = tf.grantIn(1, t0+20, "n2", 2000, GrantItem{Policy: "g", Client: "c", Want: 100})
	if g.Units != 8 || g.Exp != t0+1500 {
		t.Fatalf("second sub-lease: %d units until %d, want what is left (8) until 1500", g.Units, g.Exp-t0)
	}
	if n := tf.allowedNow(1, t0+30, 5); n != 0 {
		t.Fatalf("strict hits allowed %d with everything lent, want 0", n)
	}
	// Slices of two global windows: a grant takes from one only, the
	// earliest slice's, and names it.
	tf = newTestFSM(t)
	tf.set(mirrored("g", 400, 10*time.Second))
	tf.slices(1, t0+40, sliceOf(9, 3, 1000, t0+9000), sliceOf(10, 10, 3000, t0+19_000))
	g = tf.grantIn(1, t0+50, "n3", 2000, GrantItem{Policy: "g", Client: "c", Want: 5})
	if g.Units != 3 || g.Exp != t0+1040 || g.Parts[0].ResetAt != t0+9000 {
		t.Fatalf("sub-lease with slices of two windows: %d units until %d naming %d, want 3 of the first until 1040",
			g.Units, g.Exp-t0, g.Parts[0].ResetAt-t0)
	}
}

// TestSubleaseOnlyFromLiveSlicesOfTheTerm: no slice, an expired slice or
// an inherited one (another term's) lends nothing: NoSlice (the holder
// backs off, its hits wait for a slice in the log) and the want counts
// as short for the region's holder; the parent's word that the window
// is spent answers nothing with its Retry-After.
func TestSubleaseOnlyFromLiveSlicesOfTheTerm(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(mirrored("g", 400, 10*time.Second))
	if g := tf.grantIn(1, t0, "n1", 2000, GrantItem{Policy: "g", Client: "c", Want: 4}); !g.NoSlice || g.Units != 0 || g.Index != 0 {
		t.Fatalf("sub-lease with no slice: %+v, want NoSlice", g)
	}
	if st := tf.f.SliceStats()[0]; st.Short != 4 {
		t.Fatalf("short %d after a sub-lease found no slice, want 4 (demand)", st.Short)
	}
	tf.slices(1, t0+1, sliceOf(7, 10, 500, t0+9000))
	if g := tf.grantIn(1, t0+501, "n1", 2000, GrantItem{Policy: "g", Client: "c", Want: 4}); !g.NoSlice {
		t.Fatalf("sub-lease at the slice's expiry: %+v, want NoSlice", g)
	}
	tf.slices(1, t0+600, sliceOf(8, 10, 5000, t0+9000))
	if g := tf.grantIn(2, t0+700, "n1", 2000, GrantItem{Policy: "g", Client: "c", Want: 4}); !g.NoSlice {
		t.Fatalf("a new term lent an inherited slice: %+v, want NoSlice", g)
	}
	tf.slices(2, t0+800, SliceItem{Kind: SliceDry, Policy: "g", Client: "c", UsableMs: 300, ResetAt: t0 + 9000})
	g := tf.grantIn(2, t0+900, "n1", 2000, GrantItem{Policy: "g", Client: "c", Want: 4})
	if g.NoSlice || g.Units != 0 || g.Index == 0 || g.Parts[0].RetryAfterMs != 200 || g.Parts[0].ResetAt != t0+9000 {
		t.Fatalf("sub-lease in a spent global window: %+v, want nothing with retry 200 ms", g)
	}
}

// TestSubleaseReturnGoesBackOnlyIntoItsLiveSlices: returned units go
// back into the slices the grant took them from, only while they are
// live in the same term; after the slice expired, was withdrawn or the
// term changed they are lost (never into another slice).
func TestSubleaseReturnGoesBackOnlyIntoItsLiveSlices(t *testing.T) {
	ret := func(g GrantResult, units int64) ReturnItem {
		return ReturnItem{Policy: "g", Client: "c", Index: g.Index, Units: units}
	}
	t.Run("live", func(t *testing.T) {
		tf := newTestFSM(t)
		tf.set(mirrored("g", 400, 10*time.Second))
		tf.slices(1, t0, sliceOf(7, 10, 1000, t0+9000))
		g := tf.grantIn(1, t0+10, "n1", 2000, GrantItem{Policy: "g", Client: "c", Want: 10})
		if back := tf.giveBackIn(1, t0+20, "n1", ret(g, 3)); back != 3 {
			t.Fatalf("returned %d of 3 into a live slice", back)
		}
		if n := tf.allowedNow(1, t0+30, 20); n != 3 {
			t.Fatalf("strict hits allowed %d after 3 units came back, want 3", n)
		}
	})
	t.Run("expired", func(t *testing.T) {
		tf := newTestFSM(t)
		tf.set(mirrored("g", 400, 10*time.Second))
		tf.slices(1, t0, sliceOf(7, 1, 500, t0+9000), sliceOf(8, 10, 3000, t0+9000))
		g := tf.grantIn(1, t0+10, "n1", 2000, GrantItem{Policy: "g", Client: "c", Want: 1})
		if g.Units != 1 || g.Exp != t0+500 {
			t.Fatalf("setup: sub-lease %+v, want 1 unit of slice 7 until 500", g)
		}
		if back := tf.giveBackIn(1, t0+600, "n1", ret(g, 1)); back != 0 {
			t.Fatalf("returned %d units after the slice's end, want 0", back)
		}
		// Slice 8 is live, but the returned unit was not taken from it.
		if n := tf.allowedNow(1, t0+700, 20); n != 10 {
			t.Fatalf("strict hits allowed %d, want slice 8's 10 (nothing came back)", n)
		}
	})
	t.Run("withdrawn", func(t *testing.T) {
		tf := newTestFSM(t)
		tf.set(mirrored("g", 400, 10*time.Second))
		tf.slices(1, t0, sliceOf(7, 10, 3000, t0+9000))
		g := tf.grantIn(1, t0+10, "n1", 2000, GrantItem{Policy: "g", Client: "c", Want: 4})
		if w := tf.slices(1, t0+20, SliceItem{Kind: SliceWithdraw, Policy: "g", Client: "c", Grant: 7}).Withdrawn[0]; w != 6 {
			t.Fatalf("withdrew %d, want the 6 not lent", w)
		}
		tf.slices(1, t0+30, sliceOf(8, 5, 3000, t0+9000))
		if back := tf.giveBackIn(1, t0+40, "n1", ret(g, 4)); back != 0 {
			t.Fatalf("returned %d units of a withdrawn slice, want 0", back)
		}
		if n := tf.allowedNow(1, t0+50, 20); n != 5 {
			t.Fatalf("strict hits allowed %d, want slice 8's 5 only", n)
		}
	})
	t.Run("new term", func(t *testing.T) {
		tf := newTestFSM(t)
		tf.set(mirrored("g", 400, 10*time.Second))
		tf.slices(1, t0, sliceOf(7, 10, 3000, t0+9000))
		g := tf.grantIn(1, t0+10, "n1", 2000, GrantItem{Policy: "g", Client: "c", Want: 4})
		tf.slices(2, t0+20, sliceOf(8, 5, 3000, t0+9000))
		if back := tf.giveBackIn(2, t0+30, "n1", ret(g, 4)); back != 0 {
			t.Fatalf("returned %d units of an old term's sub-lease, want 0", back)
		}
		if n := tf.allowedNow(2, t0+40, 20); n != 5 {
			t.Fatalf("strict hits allowed %d in the new term, want its slice's 5 only", n)
		}
	})
}

// TestSubleasesStayOutOfSnapshots: a replica restored from a snapshot
// holds no slices; sub-leases made after it differ there, and stay out
// of its digest and snapshots, so the replicas still agree.
func TestSubleasesStayOutOfSnapshots(t *testing.T) {
	a := newTestFSM(t)
	a.set(mirrored("g", 400, 10*time.Second), leased(pol("fw", "fixed_window", lim(10, time.Second))))
	a.slices(1, t0, sliceOf(7, 10, 3000, t0+9000))
	b := newTestFSM(t)
	if err := b.f.Restore(io.NopCloser(bytes.NewReader(persistSnapshot(t, a.f).Bytes()))); err != nil {
		t.Fatal(err)
	}
	b.index = a.index
	for _, x := range []*testFSM{a, b} {
		x.grantIn(1, t0+10, "n1", 2000, GrantItem{Policy: "g", Client: "c", Want: 4})
		x.grantIn(1, t0+10, "n1", 2000, GrantItem{Policy: "fw", Client: "c", Want: 4})
	}
	if len(a.f.OutstandingGrants()) != 2 || len(b.f.OutstandingGrants()) != 1 {
		t.Fatalf("setup: grants %+v and %+v", a.f.OutstandingGrants(), b.f.OutstandingGrants())
	}
	if digestOf(a.f) != digestOf(b.f) {
		t.Fatal("a sub-lease only one replica could make changed its digest")
	}
}

// TestSubleasesOfAKeyAreBounded: past maxGrantsPerKey outstanding
// sub-leases of a key, a grant gets nothing (a grant of 0 units, not
// NoSlice: the slices hold units, the key just has too many holders).
func TestSubleasesOfAKeyAreBounded(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(mirrored("g", 4000, 10*time.Second))
	tf.slices(1, t0, sliceOf(7, 1000, 5000, t0+9000))
	for i := range maxGrantsPerKey {
		if g := tf.grantIn(1, t0+1, fmt.Sprint("h", i), 2000, GrantItem{Policy: "g", Client: "c", Want: 1}); g.Units != 1 {
			t.Fatalf("sub-lease %d: %+v", i, g)
		}
	}
	g := tf.grantIn(1, t0+2, "late", 2000, GrantItem{Policy: "g", Client: "c", Want: 1})
	if g.Units != 0 || g.Index == 0 || g.NoSlice {
		t.Fatalf("sub-lease past the bound: %+v, want 0 units with an id (not NoSlice)", g)
	}
}
