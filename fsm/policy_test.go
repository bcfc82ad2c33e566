package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/policy"
	"github.com/rlnode/rlnode/window"
)

func pol(name, alg string, limits ...policy.Limit) policy.Policy {
	return policy.Policy{Name: name, Algorithm: alg, Limits: limits}
}

func lim(n int64, w time.Duration) policy.Limit {
	return policy.Limit{Limit: n, Window: policy.Duration(w)}
}

func (tf *testFSM) set(ps ...policy.Policy) *SetResult {
	tf.t.Helper()
	r, ok := tf.apply(1, EncodeSetPolicies(SetUpsert, ps)).(*SetResult)
	if !ok {
		tf.t.Fatalf("set policies did not return *SetResult (fatal %v)", tf.fatal)
	}
	return r
}

// check applies one version-2 entry of groups (nil: every hit alone).
func (tf *testFSM) check(now int64, groups []int, hits ...Hit) *HitsResult {
	tf.t.Helper()
	res, ok := tf.apply(1, AppendHits(nil, now, hits, groups)).(*HitsResult)
	if !ok {
		tf.t.Fatalf("hits at %d did not return *HitsResult (fatal %v)", now, tf.fatal)
	}
	return res
}

func h2(p, client string, cost int64) Hit { return Hit{Policy: p, Client: client, Cost: cost} }

func TestNamedPoliciesAndSeveralLimits(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(pol("login", "fixed_window", lim(5, time.Minute)), pol("api", "fixed_window", lim(2, time.Second), lim(3, time.Hour)))
	// Two limits: a hit passes only if both have room and counts in both.
	for i, want := range []window.Outcome{window.Allowed, window.Allowed, window.Refused} {
		r := tf.check(t0+int64(i), nil, h2("api", "u", 1)).Hits[0]
		if r.Outcome != want || len(r.Parts) != 2 || r.Counted != (want == window.Allowed) {
			t.Fatalf("api hit %d: %+v, want %v", i, r, want)
		}
	}
	// The 1s window reopens; the hour has one left; a refused hit counted in neither.
	r := tf.check(t0+1_000, nil, h2("api", "u", 1)).Hits[0]
	if r.Outcome != window.Allowed || r.Parts[0].Remaining != 1 || r.Parts[1].Remaining != 0 || r.Main != 1 {
		t.Fatalf("after the 1s window: %+v; want allowed, 1s remaining 1, hour remaining 0 (main)", r)
	}
	if r := tf.check(t0+2_000, nil, h2("api", "u", 1)).Hits[0]; r.Outcome != window.Refused || r.Parts[0].Outcome != window.Allowed || r.Parts[0].Remaining != 2 {
		t.Fatalf("hour spent: %+v; want refused with the 1s limit untouched (remaining 2)", r)
	}
	// Policies are separate budgets; unknown ones decide nothing.
	if r := tf.check(t0, nil, h2("login", "u", 5)).Hits[0]; r.Outcome != window.Allowed || r.Parts[0].Remaining != 0 {
		t.Fatalf("login: %+v", r)
	}
	if r := tf.check(t0, nil, h2("nope", "u", 1)).Hits[0]; !r.UnknownPolicy || r.Counted {
		t.Fatalf("unknown policy: %+v", r)
	}
	if r := tf.check(t0, nil, h2("login", "v", 6)).Hits[0]; r.Outcome != window.CostExceedsLimit || r.Counted {
		t.Fatalf("cost above limit: %+v", r)
	}
}

func TestGroupsAreAllOrNothing(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(pol("user", "fixed_window", lim(3, time.Minute)), pol("org", "fixed_window", lim(2, time.Minute)))
	tf.check(t0, nil, h2("org", "o7", 2)) // the org is spent
	res := tf.check(t0+1, []int{2, 1}, h2("user", "u1", 1), h2("org", "o7", 1), h2("user", "u2", 1))
	if g := res.Hits[:2]; g[0].Outcome != window.Allowed || g[1].Outcome != window.Refused || g[0].Counted || g[1].Counted {
		t.Fatalf("group over a spent org: %+v; want user would-pass, org refused, neither counted", g)
	}
	if g := res.Hits[0]; g.Parts[0].Remaining != 3 {
		t.Fatalf("uncounted hit reports remaining %d, want 3 (nothing spent)", g.Parts[0].Remaining)
	}
	if r := res.Hits[2]; !r.Counted {
		t.Fatalf("the next group is independent: %+v", r)
	}
	if _, ok := tf.f.window("user", "u1"); ok {
		t.Fatal("a refused group left a key behind")
	}
	// Duplicates count in order; the third of three with a limit of 3 in
	// a group of four fails the whole group.
	res = tf.check(t0+2, []int{4}, h2("user", "d", 1), h2("user", "d", 1), h2("user", "d", 1), h2("user", "d", 1))
	if res.Hits[2].Outcome != window.Allowed || res.Hits[3].Outcome != window.Refused || res.Hits[0].Counted {
		t.Fatalf("duplicates: %+v", res.Hits)
	}
	res = tf.check(t0+3, []int{3}, h2("user", "d", 1), h2("user", "d", 1), h2("user", "d", 1))
	if !res.Hits[2].Counted || res.Hits[2].Parts[0].Remaining != 0 {
		t.Fatalf("three duplicates within the limit: %+v", res.Hits)
	}
	// A refused group puts back every limit of a multi-limit key, also when
	// the group touched it twice.
	tf.set(pol("multi", "token_bucket", lim(4, time.Minute), lim(9, time.Hour)))
	tf.check(t0+4, nil, h2("multi", "k", 1))
	before := digestOf(tf.f)
	res = tf.check(t0+4, []int{3}, h2("multi", "k", 2), h2("multi", "k", 1), h2("org", "o7", 1))
	if res.Hits[0].Outcome != window.Allowed || res.Hits[1].Outcome != window.Allowed || res.Hits[2].Outcome != window.Refused {
		t.Fatalf("group over a spent org: %+v", res.Hits)
	}
	if digestOf(tf.f) != before {
		t.Fatal("a refused group changed the multi-limit key")
	}
	v, _ := tf.f.Lookup("multi", "k")
	if r0, r1 := window.Peek(window.TokenBucket, window.Limit{Limit: 4, WindowMs: 60_000}, v.States[0], t0+4), window.Peek(window.TokenBucket, window.Limit{Limit: 9, WindowMs: 3_600_000}, v.States[1], t0+4); r0.Remaining != 3 || r1.Remaining != 8 {
		t.Fatalf("multi-limit key after a refused group: %d and %d left, want 3 and 8", r0.Remaining, r1.Remaining)
	}
}

func TestPolicyChangeKeepsOpenWindows(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(pol("p", "fixed_window", lim(4, time.Minute), lim(100, time.Hour)))
	tf.check(t0, nil, h2("p", "a", 3))
	// Lower the minute limit: the open window keeps its start and count,
	// so the key refuses until the window has room again.
	if r := tf.set(pol("p", "fixed_window", lim(2, time.Minute), lim(100, time.Hour))); r.Changes[0] != "changed" {
		t.Fatalf("set: %+v", r)
	}
	if r := tf.check(t0+1_000, nil, h2("p", "a", 1)).Hits[0]; r.Outcome != window.Refused || r.Parts[0].WindowStart != t0 {
		t.Fatalf("after lowering: %+v; want refused in the window opened at t0", r)
	}
	if r := tf.check(t0+60_000, nil, h2("p", "a", 1)).Hits[0]; r.Outcome != window.Allowed || r.Parts[1].Remaining != 96 {
		t.Fatalf("next minute: %+v; want allowed, hour window kept (96 left)", r)
	}
	// Raising keeps the start too; a new window length starts fresh.
	tf.set(pol("p", "fixed_window", lim(10, time.Minute), lim(5, 24*time.Hour)))
	if r := tf.check(t0+61_000, nil, h2("p", "a", 1)).Hits[0]; r.Parts[0].Remaining != 8 || r.Parts[0].WindowStart != t0+60_000 || r.Parts[1].Remaining != 4 {
		t.Fatalf("after raising: %+v", r)
	}
	if r := tf.set(pol("p", "fixed_window", lim(10, time.Minute), lim(5, 24*time.Hour))); r.Changes[0] != "unchanged" {
		t.Fatalf("same policy again: %+v", r)
	}
}

func TestDeletePolicyDropsItsWindows(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(pol("p", "fixed_window", lim(2, time.Minute)), pol("q", "fixed_window", lim(2, time.Minute)))
	tf.check(t0, nil, h2("p", "a", 2), h2("q", "a", 2))
	d0 := digestOf(tf.f)
	if r := tf.apply(1, EncodeDeletePolicy("p")).(*DeleteResult); !r.Found {
		t.Fatal("delete of an existing policy not found")
	}
	if r := tf.apply(1, EncodeDeletePolicy("p")).(*DeleteResult); r.Found {
		t.Fatal("second delete found the policy again")
	}
	if digestOf(tf.f) == d0 {
		t.Fatal("delete did not change the digest")
	}
	if r := tf.check(t0+1, nil, h2("p", "a", 1)).Hits[0]; !r.UnknownPolicy {
		t.Fatalf("check of a deleted policy: %+v", r)
	}
	// Its keys leave the key map within an entry (long before they lapse).
	if n := tf.f.Stats().StoredWindows; n != 1 {
		t.Fatalf("%d keys stored after the delete, want 1 (q/a)", n)
	}
	// Re-created, it starts from nothing: the old windows were dropped.
	tf.set(pol("p", "fixed_window", lim(2, time.Minute)))
	if r := tf.check(t0+2, nil, h2("p", "a", 1)).Hits[0]; r.Outcome != window.Allowed || r.Parts[0].Remaining != 1 {
		t.Fatalf("re-created policy: %+v; want a fresh window", r)
	}
	if r := tf.check(t0+3, nil, h2("q", "a", 1)).Hits[0]; r.Outcome != window.Refused {
		t.Fatalf("the other policy lost its window: %+v", r)
	}
	// The dead key is freed by expiry, not kept for ever.
	tf.check(t0+120_000, nil, h2("q", "z", 1))
	if n := tf.f.Stats().StoredWindows; n != 1 {
		t.Fatalf("%d keys stored after everything lapsed, want 1 (z)", n)
	}
}

func TestResetKeyAndSeed(t *testing.T) {
	tf := newTestFSM(t)
	seed := []policy.Policy{pol("default", "fixed_window", lim(2, time.Minute))}
	if r := tf.apply(1, EncodeSetPolicies(SetSeed, seed)).(*SetResult); r.Skipped || !tf.f.Seeded() {
		t.Fatalf("first seed: %+v", r)
	}
	other := []policy.Policy{pol("default", "fixed_window", lim(99, time.Minute))}
	if r := tf.apply(1, EncodeSetPolicies(SetSeed, other)).(*SetResult); !r.Skipped {
		t.Fatal("a second seed was applied")
	}
	if p, _ := tf.f.Policy("default"); p.Limits[0].Limit != 2 {
		t.Fatalf("default is %+v after a second seed", p)
	}
	tf.check(t0, nil, h2("default", "a", 2))
	if r := tf.apply(1, EncodeResetKey("default", "a")).(*ResetResult); !r.Found {
		t.Fatal("reset did not find a live key")
	}
	if r := tf.check(t0+1, nil, h2("default", "a", 1)).Hits[0]; r.Outcome != window.Allowed || r.Parts[0].Remaining != 1 {
		t.Fatalf("after reset: %+v; want a fresh window", r)
	}
}

// replay is one hit sequence over every entry kind, applied the same way on
// any FSM.
func replay(tf *testFSM, alg string, from, to int) {
	alg, align, _ := strings.Cut(alg, "+")
	ps := []policy.Policy{
		pol("one", alg, lim(3, time.Second)),
		pol("two", alg, lim(5, 2*time.Second), lim(20, time.Minute)),
	}
	ps[0].Align, ps[1].Align = align, align
	if alg == "token_bucket" {
		ps[0].Limits[0].Burst = 6
	}
	for i := from; i < to; i++ {
		now := t0 + int64(i)*37
		switch {
		case i == 0:
			tf.set(ps...)
		case i%97 == 0:
			tf.apply(1, EncodeResetKey("one", fmt.Sprintf("k%d", i%7)))
		case i%50 == 0:
			ps[1].Limits[0].Limit++ // raise a limit mid-run
			tf.set(ps[1])
		default:
			tf.check(now, []int{1, 2}, h2("one", fmt.Sprintf("k%d", i%7), 1),
				h2("two", fmt.Sprintf("k%d", i%5), int64(1+i%2)), h2("one", fmt.Sprintf("k%d", i%3), 1))
		}
	}
}

// TestReplicasAgreeThroughSnapshots replays the same hits on two fresh
// FSMs, and on a third restored mid-way from the first's snapshot, for
// each algorithm: every digest and every decision must match.
func TestReplicasAgreeThroughSnapshots(t *testing.T) {
	for _, alg := range []string{"fixed_window", "fixed_window+epoch", "sliding_window", "token_bucket"} {
		t.Run(alg, func(t *testing.T) {
			a, b := newTestFSM(t), newTestFSM(t)
			replay(a, alg, 0, 600)
			replay(b, alg, 0, 600)
			if x, y := digestOf(a.f), digestOf(b.f); x != y {
				t.Fatalf("two replicas differ: %x vs %x", x, y)
			}
			sink := persistSnapshot(t, a.f)
			c := newTestFSM(t)
			if err := c.f.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
				t.Fatal(err)
			}
			c.index = a.index
			if x, y := digestOf(a.f), digestOf(c.f); x != y {
				t.Fatalf("restored replica differs: %x vs %x", x, y)
			}
			if ps := c.f.Policies(); len(ps) != 2 || ps[1].Limits[0].Limit != a.f.Policies()[1].Limits[0].Limit {
				t.Fatalf("restored table %+v", ps)
			}
			replay(a, alg, 600, 1200)
			replay(c, alg, 600, 1200)
			if x, y := digestOf(a.f), digestOf(c.f); x != y {
				t.Fatalf("replicas diverged after the restore: %x vs %x", x, y)
			}
		})
	}
}

func TestPolicyEntriesRoundTripAndHaltWhenCorrupt(t *testing.T) {
	in := []policy.Policy{pol("a.b:c-d_e", "token_bucket", policy.Limit{Limit: 1 << 40, Window: policy.Duration(366 * 24 * time.Hour), Burst: 7}, lim(1, time.Millisecond))}
	mode, out, err := decodeSetPolicies(EncodeSetPolicies(SetSeed, in))
	if err != nil || mode != SetSeed || len(out) != 1 || !out[0].Equal(in[0]) {
		t.Fatalf("round trip: %v %+v %v", mode, out, err)
	}
	now, hits, groups, err := DecodeHits(AppendHits(nil, t0, []Hit{h2("p", "x", 2), h2("q", "y ü", 1), h2("p", "z", 3)}, []int{2, 1}))
	if err != nil || now != t0 || len(hits) != 3 || hits[1].Client != "y ü" || fmt.Sprint(groups) != "[2 1]" {
		t.Fatalf("hits round trip: %d %+v %v %v", now, hits, groups, err)
	}
	for name, data := range map[string][]byte{
		"invalid policy":    EncodeSetPolicies(SetUpsert, []policy.Policy{pol("x", "fixed_window", lim(0, time.Second))}),
		"unknown algorithm": EncodeSetPolicies(SetUpsert, []policy.Policy{pol("x", "leaky", lim(1, time.Second))}),
		"empty group":       {EntryHits, hitsV2, 2, 1, 0},
		"unknown version":   {EntryHits, 9, 2},
		"truncated delete":  EncodeDeletePolicy("abc")[:4],
	} {
		tf := newTestFSM(t)
		if r, ok := tf.apply(1, data).(error); !ok || !errors.Is(r, ErrCorrupt) || len(tf.fatal) != 1 {
			t.Errorf("%s: result %v, want a halt with ErrCorrupt", name, r)
		}
	}
}

// Policy options (consistency, align) ride in a bit of the algorithm byte:
// a policy with default options encodes exactly as before options existed,
// so older entries and snapshots read unchanged; unknown option bits halt.
func TestPolicyOptionsRoundTripAndOldBodiesUnchanged(t *testing.T) {
	plain := pol("p", "fixed_window", lim(10, time.Second))
	old := EncodeSetPolicies(SetUpsert, []policy.Policy{plain})
	// type, version, mode, count, name length, 'p', algorithm byte
	if old[6] != byte(window.FixedWindow) {
		t.Fatalf("a policy with default options changed its encoding: % x", old)
	}
	opt := plain
	opt.Consistency, opt.Align = policy.Leased, policy.AlignEpoch
	_, out, err := decodeSetPolicies(EncodeSetPolicies(SetUpsert, []policy.Policy{opt}))
	if err != nil || len(out) != 1 || !out[0].Equal(opt) || !out[0].IsLeased() || !out[0].EpochAligned() {
		t.Fatalf("options round trip: %+v %v", out, err)
	}
	if opt.Equal(plain) {
		t.Fatal("policies differing only in options compare equal")
	}
	bad := EncodeSetPolicies(SetUpsert, []policy.Policy{opt})
	bad[len(bad)-1] = 0x7c // option bits this node does not know
	tf := newTestFSM(t)
	if r, ok := tf.apply(1, bad).(error); !ok || !errors.Is(r, ErrCorrupt) {
		t.Fatalf("unknown option bits: %v, want ErrCorrupt", r)
	}
}

// TestEpochAlignedWindows: an aligned policy's keys share the window
// boundaries (multiples of the window since the epoch) whenever each key
// first hit, counts survive a snapshot, and turning alignment on or off
// is a change of algorithm: every key starts fresh.
func TestEpochAlignedWindows(t *testing.T) {
	tf := newTestFSM(t)
	p := pol("aligned", "fixed_window", lim(2, time.Minute))
	p.Align = policy.AlignEpoch
	tf.set(p)
	k := t0 / 60_000 * 60_000 // a whole minute
	for i, c := range []struct {
		now    int64
		client string
		want   window.Outcome
		reset  int64
	}{
		{k + 10_000, "a", window.Allowed, k + 60_000},
		{k + 59_000, "b", window.Allowed, k + 60_000}, // b's window ends with a's
		{k + 59_500, "a", window.Allowed, k + 60_000},
		{k + 59_999, "a", window.Refused, k + 60_000},
		{k + 60_000, "a", window.Allowed, k + 120_000}, // on the minute, not at 10 s past it
	} {
		r := tf.check(c.now, nil, h2("aligned", c.client, 1)).Hits[0]
		if r.Outcome != c.want || r.Parts[0].ResetAt != c.reset || r.Parts[0].WindowStart != c.reset-60_000 {
			t.Fatalf("hit %d (%s at +%d ms): %+v; want %v, reset at %d", i, c.client, c.now-k, r, c.want, c.reset)
		}
	}
	sink := persistSnapshot(t, tf.f)
	c := newTestFSM(t)
	if err := c.f.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if r := c.check(k+61_000, nil, h2("aligned", "a", 1)).Hits[0]; r.Outcome != window.Allowed || r.Parts[0].Remaining != 0 {
		t.Fatalf("after restore: %+v; want the restored count (1 of 2) kept", r)
	}
	p.Align = ""
	if ch := tf.set(p).Changes[0]; ch != "changed" {
		t.Fatalf("dropping align: %q, want changed", ch)
	}
	if r := tf.check(k+61_000, nil, h2("aligned", "a", 2)).Hits[0]; r.Outcome != window.Allowed || r.Parts[0].ResetAt != k+121_000 {
		t.Fatalf("anchored again: %+v; want a fresh window anchored at the hit", r)
	}
}

// TestPolicyFollowsEveryTableChange: Policy, read without the state
// machine's lock (policyView), answers the table as the last entry or
// restore left it: an added, changed, deleted and restored policy each
// show at once, and readers racing the applies see no torn table.
func TestPolicyFollowsEveryTableChange(t *testing.T) {
	tf := newTestFSM(t)
	if _, ok := tf.f.Policy("p"); ok {
		t.Fatal("p found in an empty table")
	}
	tf.set(pol("p", "fixed_window", lim(2, time.Minute)))
	if p, ok := tf.f.Policy("p"); !ok || p.Limits[0].Limit != 2 {
		t.Fatalf("added: %+v %v", p, ok)
	}
	tf.set(pol("p", "fixed_window", lim(3, time.Minute)))
	if p, _ := tf.f.Policy("p"); p.Limits[0].Limit != 3 {
		t.Fatalf("changed: %+v", p)
	}
	sink := persistSnapshot(t, tf.f)
	tf.apply(1, EncodeDeletePolicy("p"))
	if _, ok := tf.f.Policy("p"); ok {
		t.Fatal("deleted p still found")
	}
	if err := tf.f.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if p, ok := tf.f.Policy("p"); !ok || p.Limits[0].Limit != 3 {
		t.Fatalf("restored: %+v %v", p, ok)
	}
	// Racing readers (go test -race): every answer is one the table held.
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if p, ok := tf.f.Policy("p"); ok && p.Limits[0].Limit < 3 {
					t.Errorf("read limit %d, never in the table", p.Limits[0].Limit)
					return
				}
			}
		})
	}
	for i := range 200 {
		tf.set(pol("p", "fixed_window", lim(int64(3+i), time.Minute)))
	}
	close(done)
	wg.Wait()
	if p, _ := tf.f.Policy("p"); p.Limits[0].Limit != 202 {
		t.Fatalf("after 200 changes: limit %d, want 202", p.Limits[0].Limit)
	}
}
