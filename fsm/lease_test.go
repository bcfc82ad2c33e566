package fsm

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rlnode/rlnode/lease"
	"github.com/rlnode/rlnode/policy"
	"github.com/rlnode/rlnode/window"
)

func leased(p policy.Policy) policy.Policy { p.Consistency = policy.Leased; return p }

// leasedVariant is a leased policy of alg, or of a fixed window aligned to
// the epoch for "fixed_window+epoch".
func leasedVariant(name, alg string, limits ...policy.Limit) policy.Policy {
	if alg == "fixed_window+epoch" {
		p := pol(name, "fixed_window", limits...)
		p.Align = policy.AlignEpoch
		return leased(p)
	}
	return leased(pol(name, alg, limits...))
}

func (tf *testFSM) grant(now int64, holder string, leaseMs int64, items ...GrantItem) *GrantsResult {
	tf.t.Helper()
	r, ok := tf.apply(1, EncodeGrant(now, holder, leaseMs, items)).(*GrantsResult)
	if !ok {
		tf.t.Fatalf("grant did not return *GrantsResult (fatal %v)", tf.fatal)
	}
	return r
}

func (tf *testFSM) giveBack(now int64, holder string, items ...ReturnItem) *ReturnsResult {
	tf.t.Helper()
	r, ok := tf.apply(1, EncodeReturn(now, holder, items)).(*ReturnsResult)
	if !ok {
		tf.t.Fatalf("return did not return *ReturnsResult (fatal %v)", tf.fatal)
	}
	return r
}

// TestGrantCountsAsSpent: granted units leave every limit's budget at once,
// so strict hits and other holders see them spent.
func TestGrantCountsAsSpent(t *testing.T) {
	for _, alg := range []string{"fixed_window", "fixed_window+epoch", "sliding_window", "token_bucket"} {
		t.Run(alg, func(t *testing.T) {
			tf := newTestFSM(t)
			tf.set(leasedVariant("p", alg, lim(10, time.Minute), lim(25, time.Hour)))
			g := tf.grant(t0, "n1", 2000, GrantItem{Policy: "p", Client: "c", Want: 7}).Grants[0]
			if g.Units != 7 || g.Index != tf.index {
				t.Fatalf("grant %+v, want 7 units at index %d", g, tf.index)
			}
			if r := tf.check(t0+1, nil, h2("p", "c", 4)).Hits[0]; r.Counted {
				t.Fatalf("4 more of 10 with 7 granted was allowed: %+v", r)
			}
			if r := tf.check(t0+1, nil, h2("p", "c", 3)).Hits[0]; !r.Counted {
				t.Fatalf("the last 3 of 10 were refused: %+v", r)
			}
			if g := tf.grant(t0+2, "n2", 2000, GrantItem{Policy: "p", Client: "c", Want: 5}).Grants[0]; g.Units != 0 {
				t.Fatalf("a second holder got %d units of a spent budget", g.Units)
			}
		})
	}
}

func TestGrantOnStrictOrUnknownPolicyGivesNothing(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(pol("strict", "fixed_window", lim(10, time.Minute)))
	r := tf.grant(t0, "n1", 1000, GrantItem{Policy: "strict", Client: "c", Want: 5}, GrantItem{Policy: "nope", Client: "c", Want: 5})
	if !r.Grants[0].NotLeased || r.Grants[0].Units != 0 || !r.Grants[1].UnknownPolicy {
		t.Fatalf("grants %+v", r.Grants)
	}
	if r := tf.check(t0, nil, h2("strict", "c", 10)).Hits[0]; !r.Counted {
		t.Fatal("a refused grant took budget")
	}
}

// TestGrantExpiresAtWindowEnd: a fixed or sliding grant ends with the
// window its units were counted in, whatever lease was asked.
func TestGrantExpiresAtWindowEnd(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(leased(pol("fw", "fixed_window", lim(10, time.Second))), leased(pol("sw", "sliding_window", lim(10, time.Second))),
		leased(pol("tb", "token_bucket", lim(10, time.Second))), leasedVariant("fe", "fixed_window+epoch", lim(10, time.Second)))
	tf.check(t0, nil, h2("fw", "c", 1))     // the fixed window opens at t0
	tf.check(t0+200, nil, h2("fe", "c", 1)) // the aligned one is [t0, t0+1000) all the same
	r := tf.grant(t0+300, "n1", 5000, GrantItem{"fw", "c", 3}, GrantItem{"sw", "c", 3}, GrantItem{"tb", "c", 3}, GrantItem{"fe", "c", 3})
	if got := r.Grants[0].Exp; got != t0+1000 {
		t.Fatalf("fixed grant expires at %d, want the window end %d", got, t0+1000)
	}
	if want := (t0+300)/1000*1000 + 1000; r.Grants[1].Exp != want {
		t.Fatalf("sliding grant expires at %d, want the aligned window end %d", r.Grants[1].Exp, want)
	}
	if got := r.Grants[2].Exp; got != t0+300+5000 {
		t.Fatalf("bucket grant expires at %d, want the lease end %d", got, t0+5300)
	}
	if got := r.Grants[3].Exp; r.Grants[3].Units != 3 || got != t0+1000 {
		t.Fatalf("aligned grant %+v, want 3 units expiring at the aligned window end %d", r.Grants[3], t0+1000)
	}
}

// TestReturnOnlyWithinWindow: unused units come back while the grant's
// window lasts, never into a later window, and only to their holder.
func TestReturnOnlyWithinWindow(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(leased(pol("fw", "fixed_window", lim(10, time.Second))))
	g := tf.grant(t0, "n1", 5000, GrantItem{"fw", "a", 8}, GrantItem{"fw", "b", 8}).Grants
	if r := tf.giveBack(t0+10, "n2", ReturnItem{"fw", "a", g[0].Index, 8}); r.Returned[0] != 0 {
		t.Fatal("another holder returned n1's units")
	}
	if r := tf.giveBack(t0+10, "n1", ReturnItem{"fw", "a", g[0].Index, 5}); r.Returned[0] != 5 {
		t.Fatalf("returned %d, want 5", r.Returned[0])
	}
	if r := tf.check(t0+11, nil, h2("fw", "a", 7)).Hits[0]; !r.Counted {
		t.Fatal("returned units are not back in the window")
	}
	if r := tf.giveBack(t0+12, "n1", ReturnItem{"fw", "a", g[0].Index, 3}); r.Returned[0] != 0 {
		t.Fatal("a grant returned twice")
	}
	// b's window ends at t0+1000; a return after it gives nothing to the next window.
	tf.check(t0+1000, nil, h2("fw", "b", 1))
	if r := tf.giveBack(t0+1001, "n1", ReturnItem{"fw", "b", g[1].Index, 8}); r.Returned[0] != 0 {
		t.Fatal("a return after the window landed in the next window")
	}
	if r := tf.check(t0+1002, nil, h2("fw", "b", 10)).Hits[0]; r.Counted {
		t.Fatal("the next window took 11 hits")
	}
}

// TestReturnOnlyWithinAlignedWindow: an aligned fixed window's units come
// back only while the aligned window they were granted in lasts: its end
// is the next multiple of W, not the first hit + W.
func TestReturnOnlyWithinAlignedWindow(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(leasedVariant("fe", "fixed_window+epoch", lim(10, time.Second)))
	g := tf.grant(t0+600, "n1", 5000, GrantItem{"fe", "a", 8}, GrantItem{"fe", "b", 8}).Grants
	if g[0].Units != 8 || g[1].Exp != t0+1000 {
		t.Fatalf("grants %+v, want 8 units each expiring at %d", g, t0+1000)
	}
	if r := tf.giveBack(t0+700, "n1", ReturnItem{"fe", "a", g[0].Index, 5}); r.Returned[0] != 5 {
		t.Fatalf("returned %d, want 5", r.Returned[0])
	}
	if r := tf.check(t0+701, nil, h2("fe", "a", 7)).Hits[0]; !r.Counted {
		t.Fatal("returned units are not back in the aligned window")
	}
	// b's aligned window ends at t0+1000 (an anchored one would last to t0+1600).
	tf.check(t0+1000, nil, h2("fe", "b", 1))
	if r := tf.giveBack(t0+1001, "n1", ReturnItem{"fe", "b", g[1].Index, 8}); r.Returned[0] != 0 {
		t.Fatal("a return after the aligned window landed in the next window")
	}
	if r := tf.check(t0+1002, nil, h2("fe", "b", 10)).Hits[0]; r.Counted {
		t.Fatal("the next aligned window took 11 hits")
	}
}

// TestTokenBucketCapWhileGranted: tokens held by a holder keep the bucket
// below full, so a burst after a long refill plus the held tokens never
// exceed the capacity; after the grant expires the cap lifts.
func TestTokenBucketCapWhileGranted(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(leased(pol("tb", "token_bucket", lim(10, time.Second))))
	g := tf.grant(t0, "n1", 5000, GrantItem{"tb", "c", 6}).Grants[0]
	if g.Units != 6 {
		t.Fatalf("granted %d", g.Units)
	}
	// 2 s later the bucket would be full again; n1 still holds 6 tokens.
	if r := tf.check(t0+2000, nil, h2("tb", "c", 5)).Hits[0]; r.Counted {
		t.Fatal("5 tokens with 6 held of 10 were allowed: held + bucket over capacity")
	}
	if r := tf.check(t0+2000, nil, h2("tb", "c", 4)).Hits[0]; !r.Counted {
		t.Fatal("4 tokens with 6 held of 10 were refused")
	}
	// At the grant's expiry (t0+5000) the cap lifts, but the refill it held
	// back does not come back: the bucket holds 10-6 = 4 then, and refills
	// from there.
	if r := tf.check(t0+5000, nil, h2("tb", "c", 5)).Hits[0]; r.Counted {
		t.Fatal("more than the capped level came back at expiry")
	}
	if r := tf.check(t0+5000, nil, h2("tb", "c", 4)).Hits[0]; !r.Counted {
		t.Fatalf("at expiry the bucket lacks 4 tokens: %+v", r)
	}
	if len(tf.f.OutstandingGrants()) != 0 {
		t.Fatal("the expired grant is still outstanding")
	}
}

// TestGrantFairShare: with another holder's demand outstanding, a grant
// gets its proportional share of what is left, not all of it.
func TestGrantFairShare(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(leased(pol("fw", "fixed_window", lim(100, time.Minute))))
	if g := tf.grant(t0, "n1", 2000, GrantItem{"fw", "c", 40}).Grants[0]; g.Units != 40 {
		t.Fatalf("first grant %d", g.Units)
	}
	// 60 left; n2 wants 120, n1's outstanding grant wanted 40: 60*120/160 = 45.
	if g := tf.grant(t0+1, "n2", 2000, GrantItem{"fw", "c", 120}).Grants[0]; g.Units != 45 {
		t.Fatalf("second grant %d, want the proportional share 45", g.Units)
	}
}

// TestSnapshotCarriesGrants: a replica restored from a snapshot holds the
// same grants, agrees on the digest, and keeps agreeing on what follows.
func TestSnapshotCarriesGrants(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(leased(pol("tb", "token_bucket", lim(10, time.Second))), leased(pol("fw", "fixed_window", lim(10, time.Second))))
	g := tf.grant(t0, "n1", 3000, GrantItem{"tb", "c", 6}, GrantItem{"fw", "c", 4}).Grants
	sink := persistSnapshot(t, tf.f)
	if sink.Bytes()[4] != snapshotV3 {
		t.Fatalf("snapshot version %d", sink.Bytes()[4])
	}
	other := newTestFSM(t)
	if err := other.f.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	other.index = tf.index
	if digestOf(other.f) != digestOf(tf.f) || len(other.f.OutstandingGrants()) != 2 {
		t.Fatalf("restored grants %+v", other.f.OutstandingGrants())
	}
	for _, x := range []*testFSM{tf, other} {
		x.giveBack(t0+10, "n1", ReturnItem{"fw", "c", g[1].Index, 4})
		x.check(t0+2000, nil, h2("tb", "c", 5))
		x.check(t0+4000, nil, h2("tb", "c", 1))
	}
	if digestOf(other.f) != digestOf(tf.f) {
		t.Fatal("replicas diverged after the restore")
	}
}

// TestReplicasAgreeWithGrants replays hits, grants and returns with budget
// pressure on expiry, on a fresh replica and one restored mid-way.
func TestReplicasAgreeWithGrants(t *testing.T) {
	run := func(tf *testFSM, from, to int) {
		for i := from; i < to; i++ {
			now := t0 + int64(i)*13
			c := string(rune('a' + i%5))
			switch i % 4 {
			case 0:
				tf.grant(now, "n1", int64(100+i%300), GrantItem{"tb", c, 3}, GrantItem{"fw", c, 2})
			case 1:
				tf.giveBack(now, "n1", ReturnItem{"tb", c, uint64(i + 1), 2})
			default:
				tf.check(now, nil, h2("tb", c, 1), h2("fw", c, 1))
			}
		}
	}
	ps := []policy.Policy{leased(pol("tb", "token_bucket", lim(20, time.Second))), leased(pol("fw", "fixed_window", lim(20, time.Second)))}
	a := newTestFSM(t)
	a.f.cfg.ExpireBudget = 1
	a.set(ps...)
	run(a, 0, 300)
	b := newTestFSM(t)
	b.f.cfg.ExpireBudget = 1
	if err := b.f.Restore(io.NopCloser(bytes.NewReader(persistSnapshot(t, a.f).Bytes()))); err != nil {
		t.Fatal(err)
	}
	b.index = a.index
	run(a, 300, 900)
	run(b, 300, 900)
	if digestOf(a.f) != digestOf(b.f) {
		t.Fatal("replicas with grants diverged")
	}
}

// TestRestoreVersion2Snapshot restores a snapshot written by the release
// before leases (scripts/make-v2-fixture.sh): keys of every algorithm and
// a leased policy, no grants.
func TestRestoreVersion2Snapshot(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "v2-snapshot.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if b[4] != snapshotV2 {
		t.Fatalf("fixture is version %d", b[4])
	}
	tf := newTestFSM(t)
	if err := tf.f.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		t.Fatal(err)
	}
	tf.index = tf.f.Stats().AppliedIndex
	for _, c := range []struct {
		policy, client string
		want           window.State
	}{{"fw", "alice", window.State{A: 1_700_000_000_000, B: 3}}, {"leasedfw", "bob", window.State{A: 1_700_000_000_000, B: 7}}} {
		v, ok := tf.f.Lookup(c.policy, c.client)
		if !ok || !v.Stored || v.States[0] != c.want {
			t.Fatalf("%s/%s after restore: %+v", c.policy, c.client, v)
		}
	}
	if p, _ := tf.f.Policy("leasedfw"); !p.IsLeased() {
		t.Fatal("the leased option was lost")
	}
	// The old leased key's window keeps its count: 3 left to grant.
	if g := tf.grant(1_700_000_000_100, "n1", 1000, GrantItem{"leasedfw", "bob", 5}).Grants[0]; g.Units != 3 {
		t.Fatalf("granted %d of the 3 left", g.Units)
	}
	if persistSnapshot(t, tf.f).Bytes()[4] != snapshotV3 {
		t.Fatal("a new snapshot is not version 3")
	}
}

// TestRefundTakesOffTheCurrentWindow: a return item naming no grant (an
// Envoy descriptor's is_negative_hits) takes units off the key's current
// window, never below zero, and gives nothing to a window that lapsed.
func TestRefundTakesOffTheCurrentWindow(t *testing.T) {
	for _, alg := range []string{"fixed_window", "fixed_window+epoch", "sliding_window"} {
		t.Run(alg, func(t *testing.T) {
			tf := newTestFSM(t)
			p := leasedVariant("p", alg, lim(10, time.Second))
			p.Consistency = "" // refunds need no lease
			tf.set(p)
			refund := func(now, units int64) int64 {
				return tf.giveBack(now, "rls", ReturnItem{"p", "c", RefundIndex, units}).Returned[0]
			}
			if got := refund(t0, 3); got != 0 {
				t.Fatalf("a refund of a key never hit gave back %d", got)
			}
			tf.check(t0+100, nil, h2("p", "c", 10))
			if got := refund(t0+200, 4); got != 4 {
				t.Fatalf("refund gave back %d, want 4", got)
			}
			if r := tf.check(t0+300, nil, h2("p", "c", 4)).Hits[0]; !r.Counted {
				t.Fatal("refunded units are not back in the window")
			}
			refund(t0+400, 50) // more than counted: the count stops at zero
			if r := tf.check(t0+500, nil, h2("p", "c", 10)).Hits[0]; !r.Counted || r.Parts[r.Main].Remaining != 0 {
				t.Fatalf("after a refund past zero the window holds not exactly 10: %+v", r)
			}
			if r := tf.check(t0+600, nil, h2("p", "c", 1)).Hits[0]; r.Counted {
				t.Fatal("a refund below zero left room for an 11th hit")
			}
			if got := refund(t0+2500, 5); got != 0 {
				t.Fatalf("a refund after the window lapsed gave back %d", got)
			}
		})
	}
}

// TestRefundLeavesGrantedUnitsCounted: a refund on a key with outstanding
// grants gives nothing back, or the holder's units and strict hits
// together could pass the limit.
func TestRefundLeavesGrantedUnitsCounted(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(leasedVariant("p", "fixed_window+epoch", lim(10, time.Second)))
	if g := tf.grant(t0, "n1", 900, GrantItem{"p", "c", 10}).Grants[0]; g.Units != 10 {
		t.Fatalf("granted %d of 10", g.Units)
	}
	if got := tf.giveBack(t0+1, "rls", ReturnItem{"p", "c", RefundIndex, 5}).Returned[0]; got != 0 {
		t.Fatalf("a refund took %d granted units off the count", got)
	}
	if r := tf.check(t0+2, nil, h2("p", "c", 1)).Hits[0]; r.Counted {
		t.Fatal("a strict hit got in beside 10 granted units")
	}
}

func TestLeaseEntriesRoundTripAndHaltWhenCorrupt(t *testing.T) {
	g := EncodeGrant(t0, "n1", 2000, []GrantItem{{"p", "c", 5}})
	if e, err := decodeGrant(g); err != nil || e.holder != "n1" || e.leaseMs != 2000 || e.items[0] != (GrantItem{"p", "c", 5}) {
		t.Fatalf("grant round trip %+v %v", e, err)
	}
	rt := EncodeReturn(t0, "n1", []ReturnItem{{"p", "c", 9, 3}})
	if e, err := decodeReturn(rt); err != nil || e.items[0] != (ReturnItem{"p", "c", 9, 3}) {
		t.Fatalf("return round trip %+v %v", e, err)
	}
	for _, bad := range [][]byte{
		EncodeGrant(t0, "n1", lease.MaxLeaseMs+1, []GrantItem{{"p", "c", 5}}),
		EncodeGrant(t0, "", 100, []GrantItem{{"p", "c", 5}}),
		EncodeReturn(t0, "n1", []ReturnItem{{"p", "c", RefundIndex, 0}}), // a refund of nothing
		g[:len(g)-1],
	} {
		if CheckEntry(bad) == nil {
			t.Fatalf("CheckEntry accepted %x", bad)
		}
		tf := newTestFSM(t)
		tf.apply(1, bad)
		if len(tf.fatal) != 1 {
			t.Fatalf("corrupt lease entry %x did not halt", bad)
		}
	}
}
