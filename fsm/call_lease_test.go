package fsm

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/rlnode/rlnode/window"
)

func grantItem(key string, limit, want, leaseMs int64) CallItem {
	it := tokenItem(key, 0, limit)
	it.Lease = CallLease{Grant: true, Holder: "node-a", Want: want, LeaseMs: leaseMs}
	return it
}

func returnItem(key string, limit int64, index uint64, units int64) CallItem {
	it := tokenItem(key, 0, limit)
	it.Lease = CallLease{Return: true, Holder: "node-a", Index: index, Units: units}
	return it
}

// allowed counts the allowed strict hits of cost 1 among n.
func (tf *testFSM) allowedCalls(now int64, key string, limit int64, n int) int {
	got := 0
	for range n {
		if !tf.calls(now, "o", 100, 100, tokenItem(key, 1, limit)).Items[0].Over {
			got++
		}
	}
	return got
}

// A grant takes its units off the key when it applies, so strict calls
// and other holders see them spent; it lends only from a live key of the
// item's parameters and never creates one.
func TestCallGrantCountsUnitsAsSpent(t *testing.T) {
	tf := newTestFSM(t)
	if o := tf.calls(t0, "o", 100, 100, grantItem("a", 10, 5, 2000)).Items[0]; o.Units != 0 || o.Leasable {
		t.Fatalf("grant on a key never seen: %+v", o)
	}
	if tf.f.calls.total != 0 {
		t.Fatalf("a grant created a key: %+v", tf.f.calls)
	}
	tf.calls(t0, "o", 100, 100, tokenItem("a", 1, 10))
	o := tf.calls(t0+1, "o", 100, 100, grantItem("a", 10, 5, 2000)).Items[0]
	if o.Units != 5 || !o.Leasable || o.GrantIndex == 0 || o.Remaining != 4 || o.Reset != t0+60_000 || o.Expiry != t0+1+2000 {
		t.Fatalf("grant: %+v", o)
	}
	if got := tf.allowedCalls(t0+2, "a", 10, 10); got != 4 {
		t.Fatalf("strict calls allowed %d after 1 hit and 5 lent, want 4", got)
	}
	if o := tf.calls(t0+3, "o", 100, 100, grantItem("a", 20, 5, 2000)).Items[0]; o.Units != 0 || o.Leasable {
		t.Fatalf("grant with another limit: %+v", o)
	}
	if o := tf.calls(t0+3, "o", 100, 100, grantItem("a", 10, 5, 2000)).Items[0]; o.Units != 0 || !o.Leasable || !o.Over {
		t.Fatalf("grant of a spent window: %+v", o)
	}
	tf.set(pol("api", "fixed_window", lim(2, time.Hour)))
	if o := tf.calls(t0+4, "o", 100, 100, grantItem("a", 10, 5, 2000)).Items[0]; o.Units != 0 || o.Leasable || !o.Policy {
		t.Fatalf("grant of a name a policy decides: %+v", o)
	}
}

// A return gives units back only to the window they were lent from, and
// only once.
func TestCallReturnOnlyToItsWindow(t *testing.T) {
	tf := newTestFSM(t)
	tf.calls(t0, "o", 100, 100, tokenItem("a", 1, 10))
	g := tf.calls(t0+1, "o", 100, 100, grantItem("a", 10, 6, 2000)).Items[0]
	if r := tf.calls(t0+2, "o", 100, 100, returnItem("a", 10, g.GrantIndex, 4)).Items[0]; r.Units != 4 {
		t.Fatalf("returned %d, want 4", r.Units)
	}
	if r := tf.calls(t0+3, "o", 100, 100, returnItem("a", 10, g.GrantIndex, 4)).Items[0]; r.Units != 0 {
		t.Fatalf("returned twice: %d", r.Units)
	}
	if got := tf.allowedCalls(t0+4, "a", 10, 10); got != 7 {
		t.Fatalf("allowed %d, want 7 (10 - 1 - 2 spent)", got)
	}
	// A grant from a window that ended gives nothing back to the next one.
	tf2 := newTestFSM(t)
	tf2.calls(t0, "o", 100, 100, tokenItem("a", 1, 10))
	g = tf2.calls(t0+59_000, "o", 100, 100, grantItem("a", 10, 9, 2000)).Items[0]
	if g.Expiry != t0+60_001 {
		t.Fatalf("grant not cut at the window's end: %+v", g)
	}
	tf2.calls(t0+60_500, "o", 100, 100, tokenItem("a", 1, 10))
	if r := tf2.calls(t0+60_600, "o", 100, 100, returnItem("a", 10, g.GrantIndex, 9)).Items[0]; r.Units != 0 {
		t.Fatalf("a return reached another window: %d", r.Units)
	}
	// A limit lowered while units are lent: the remaining is moved by the
	// difference and clamped at 0, so a return would pass the new limit.
	// limit 100, 10 spent, 45 lent: remaining 45; limit 50: remaining 0.
	// Giving the 45 back would allow 45 more, 55 in all under 50.
	tf3 := newTestFSM(t)
	for range 10 {
		tf3.calls(t0, "o", 100, 100, tokenItem("a", 1, 100))
	}
	g = tf3.calls(t0+1, "o", 100, 100, grantItem("a", 100, 45, 2000)).Items[0]
	if o := tf3.calls(t0+2, "o", 100, 100, tokenItem("a", 0, 50)).Items[0]; g.Units != 45 || o.Remaining != 0 {
		t.Fatalf("grant %+v, then the lower limit answered %+v", g, o)
	}
	if r := tf3.calls(t0+3, "o", 100, 100, returnItem("a", 50, g.GrantIndex, 45)).Items[0]; r.Units != 0 {
		t.Fatalf("a return after the limit changed gave back %d", r.Units)
	}
	if got := tf3.allowedCalls(t0+4, "a", 50, 60); got != 0 {
		t.Fatalf("allowed %d more under the lowered limit of 50 with 10 spent and 45 lent", got)
	}
}

// Units lent from a window and still held when a call opens a new one
// (a shorter duration restarts it, RESET_REMAINING) count as spent there
// too: a holder may still spend them.
func TestCallHeldUnitsCountInANewWindow(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(tf *testFSM)
	}{
		{"shorter duration", func(tf *testFSM) {
			it := tokenItem("a", 0, 10)
			it.Call.Duration = 500 // Start + 500 is past: the window restarts full
			tf.calls(t0+1000, "o", 100, 100, it)
		}},
		{"reset remaining", func(tf *testFSM) {
			it := tokenItem("a", 1, 10)
			it.Call.ResetRemaining = true
			if o := tf.calls(t0+1000, "o", 100, 100, it).Items[0]; o.Remaining != 2 {
				t.Fatalf("reset answered %+v, want remaining 2 (8 held)", o)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tf := newTestFSM(t)
			tf.calls(t0, "o", 100, 100, tokenItem("a", 1, 10))
			if g := tf.calls(t0+1, "o", 100, 100, grantItem("a", 10, 8, 60_000)).Items[0]; g.Units != 8 {
				t.Fatalf("grant: %+v", g)
			}
			tc.open(tf)
			key, n := "a", 10
			lim := int64(10)
			got := 0
			for range n {
				it := tokenItem(key, 1, lim)
				if tc.name == "shorter duration" {
					it.Call.Duration = 500
				}
				if !tf.calls(t0+1001, "o", 100, 100, it).Items[0].Over {
					got++
				}
			}
			if got != 2 {
				t.Fatalf("the new window allowed %d with 8 units held, want 2", got)
			}
		})
	}
}

// Lease items round-trip through the codec; malformed ones are refused.
func TestCallLeaseItemsCodec(t *testing.T) {
	e := CallsEntry{Now: t0, Owner: "o", MaxKeys: 10, MaxKeysPerOwner: 10,
		Items: []CallItem{grantItem("a", 10, 3, 2000), returnItem("a", 10, 7, 2), tokenItem("b", 1, 5)}}
	got, err := decodeCalls(EncodeCalls(e))
	if err != nil {
		t.Fatal(err)
	}
	for i := range e.Items {
		if got.Items[i] != e.Items[i] {
			t.Fatalf("item %d: %+v, want %+v", i, got.Items[i], e.Items[i])
		}
	}
	for _, bad := range []func(*CallItem){
		func(it *CallItem) { it.Lease.Return = true },
		func(it *CallItem) { it.Call.Hits = 1 },
		func(it *CallItem) { it.Call.Alg, it.Call.Limit = window.LeakyBucket, 10 },
		func(it *CallItem) { it.Lease.Holder = "" },
		func(it *CallItem) { it.Lease.Want = 0 },
		func(it *CallItem) { it.Lease.LeaseMs = 600_000 },
	} {
		it := grantItem("a", 10, 3, 2000)
		bad(&it)
		if _, err := decodeCalls(EncodeCalls(CallsEntry{Now: t0, Owner: "o", MaxKeys: 10, MaxKeysPerOwner: 10, Items: []CallItem{it}})); err == nil {
			t.Fatalf("decoded a bad lease item %+v", it)
		}
	}
}

// A snapshot carries per-call grants: a restored replica takes the return.
func TestCallGrantsInSnapshot(t *testing.T) {
	tf := newTestFSM(t)
	tf.calls(t0, "o", 100, 100, tokenItem("a", 1, 10))
	g := tf.calls(t0+1, "o", 100, 100, grantItem("a", 10, 6, 2000)).Items[0]
	other := newTestFSM(t)
	if err := other.f.Restore(io.NopCloser(bytes.NewReader(persistSnapshot(t, tf.f).Bytes()))); err != nil {
		t.Fatal(err)
	}
	other.index = tf.index
	if r := other.calls(t0+2, "o", 100, 100, returnItem("a", 10, g.GrantIndex, 6)).Items[0]; r.Units != 6 {
		t.Fatalf("restored replica returned %d, want 6", r.Units)
	}
}
