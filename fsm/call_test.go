package fsm

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/rlnode/rlnode/window"
)

func (tf *testFSM) calls(now int64, owner string, maxKeys, perOwner int64, items ...CallItem) *CallsResult {
	tf.t.Helper()
	r, ok := tf.apply(1, EncodeCalls(CallsEntry{Now: now, Owner: owner, MaxKeys: maxKeys, MaxKeysPerOwner: perOwner, Items: items})).(*CallsResult)
	if !ok {
		tf.t.Fatalf("calls entry did not return *CallsResult (fatal %v)", tf.fatal)
	}
	return r
}

func tokenItem(key string, hits, limit int64) CallItem {
	return CallItem{Name: "api", Key: key, Call: window.Call{Alg: window.CallTokenBucket, Hits: hits, Limit: limit, Duration: 60_000}}
}

// Each item of a batch is decided on its own, in order, and the state
// carries gubernator's rules across entries (a limit change moves what is
// left by the difference).
func TestCallsDecideEachItem(t *testing.T) {
	tf := newTestFSM(t)
	r := tf.calls(t0, "", 100, 100, tokenItem("a", 3, 5), tokenItem("a", 3, 5), tokenItem("b", 1, 5))
	want := []window.CallResult{
		{Limit: 5, Remaining: 2, Reset: t0 + 60_000},
		{Over: true, Limit: 5, Remaining: 2, Reset: t0 + 60_000},
		{Limit: 5, Remaining: 4, Reset: t0 + 60_000},
	}
	for i, w := range want {
		if r.Items[i].CallResult != w || r.Items[i].Full || r.Items[i].Policy {
			t.Fatalf("item %d: %+v, want %+v", i, r.Items[i], w)
		}
	}
	r = tf.calls(t0+10, "", 100, 100, tokenItem("a", 1, 10))
	if got := r.Items[0].CallResult; got.Remaining != 6 || got.Over {
		t.Fatalf("after raising the limit: %+v", got)
	}
	leaky := CallItem{Name: "api", Key: "a", Call: window.Call{Alg: window.LeakyBucket, Hits: 1, Limit: 10, Duration: 10_000}}
	if got := tf.calls(t0+20, "", 100, 100, leaky).Items[0]; got.Remaining != 9 {
		t.Fatalf("another algorithm starts the key afresh: %+v", got)
	}
}

func TestCallsResetRemainingForgetsTheKey(t *testing.T) {
	tf := newTestFSM(t)
	tf.calls(t0, "", 100, 100, tokenItem("a", 5, 5))
	reset := tokenItem("a", 1, 5)
	reset.Call.ResetRemaining = true
	if got := tf.calls(t0+1, "", 100, 100, reset).Items[0]; got.Remaining != 5 || got.Over || got.Reset != 0 {
		t.Fatalf("reset: %+v", got)
	}
	if got := tf.calls(t0+2, "", 100, 100, tokenItem("a", 1, 5)).Items[0]; got.Remaining != 4 || got.Reset != t0+2+60_000 {
		t.Fatalf("after reset: %+v", got)
	}
}

// A policy of the item's name in the table decides it, with the table's
// limits: the operator's policy wins over the caller's.
func TestCallsNamedPolicyWins(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(pol("api", "fixed_window", lim(2, time.Hour)))
	r := tf.calls(t0, "", 100, 100, tokenItem("a", 1, 100), tokenItem("a", 1, 100), tokenItem("a", 1, 100), tokenItem("a", 0, 100))
	for i, w := range []struct {
		over      bool
		remaining int64
	}{{false, 1}, {false, 0}, {true, 0}, {false, 0}} {
		if it := r.Items[i]; !it.Policy || it.Over != w.over || it.Remaining != w.remaining || it.Limit != 2 {
			t.Fatalf("item %d: %+v", i, it)
		}
	}
	tf.set(conc("jobs", 2))
	if it := tf.calls(t0, "", 100, 100, CallItem{Name: "jobs", Key: "a", Call: tokenItem("a", 1, 1).Call}).Items[0]; it.Err == "" {
		t.Fatalf("a concurrency policy decided a hit: %+v", it)
	}
}

// Stored per-call keys are bounded per owner and in all; a full owner
// does not take another's room, and keys free their room when they lapse.
func TestCallsKeyBounds(t *testing.T) {
	tf := newTestFSM(t)
	var items []CallItem
	for _, k := range []string{"a", "b", "c"} {
		items = append(items, tokenItem(k, 1, 5))
	}
	r := tf.calls(t0, "mallory", 3, 2, items...)
	if r.Items[0].Full || r.Items[1].Full || !r.Items[2].Full || r.Items[2].Remaining != 0 {
		t.Fatalf("per owner: %+v", r.Items)
	}
	// Known keys still decide at the bound.
	if it := tf.calls(t0+1, "mallory", 3, 2, tokenItem("a", 1, 5)).Items[0]; it.Full || it.Remaining != 3 {
		t.Fatalf("known key: %+v", it)
	}
	if it := tf.calls(t0+1, "alice", 3, 2, tokenItem("x", 1, 5)).Items[0]; it.Full {
		t.Fatalf("another owner's first key refused: %+v", it)
	}
	if it := tf.calls(t0+1, "bob", 3, 2, tokenItem("y", 1, 5)).Items[0]; !it.Full {
		t.Fatalf("node-wide bound not kept: %+v", it)
	}
	// After the windows lapse, their room comes back.
	if it := tf.calls(t0+60_002, "bob", 3, 2, tokenItem("y", 1, 5)).Items[0]; it.Full {
		t.Fatalf("lapsed keys kept their room: %+v", it)
	}
	if tf.f.calls.total != 1 {
		t.Fatalf("%d keys counted, want 1", tf.f.calls.total)
	}
}

// Per-call keys survive a snapshot and restore (same digest, same next
// decision, counts rebuilt) and a delete of any policy.
func TestCallsSnapshotAndPolicyDelete(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(pol("other", "fixed_window", lim(2, time.Hour)))
	leaky := CallItem{Name: "lk", Key: "k", Call: window.Call{Alg: window.LeakyBucket, Hits: 4, Limit: 10, Duration: 10_000, Burst: 12}}
	tf.calls(t0, "o", 100, 100, tokenItem("a", 3, 5), leaky)
	tf.apply(1, EncodeDeletePolicy("other"))
	sink := persistSnapshot(t, tf.f)
	restored := newTestFSM(t)
	if err := restored.f.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if digestOf(tf.f) != digestOf(restored.f) {
		t.Fatal("digest differs after restore")
	}
	if restored.f.calls.total != 2 || restored.f.calls.byOwner[callOwnerID("o")] != 2 {
		t.Fatalf("counts after restore: %+v", restored.f.calls)
	}
	for _, x := range []*testFSM{tf, restored} {
		x.index = 100
		r := x.calls(t0+1000, "o", 100, 100, tokenItem("a", 1, 5), leaky)
		if r.Items[0].Remaining != 1 || r.Items[1].Remaining != 5 {
			t.Fatalf("after delete/restore: %+v", r.Items)
		}
	}
}

func TestCallsEntryValidation(t *testing.T) {
	good := CallsEntry{Now: t0, MaxKeys: 10, MaxKeysPerOwner: 5, Items: []CallItem{tokenItem("a", 1, 1)}}
	if _, err := decodeCalls(EncodeCalls(good)); err != nil {
		t.Fatal(err)
	}
	for name, e := range map[string]CallsEntry{
		"no items":      {Now: t0, MaxKeys: 10, MaxKeysPerOwner: 5},
		"empty key":     {Now: t0, MaxKeys: 10, MaxKeysPerOwner: 5, Items: []CallItem{tokenItem("", 1, 1)}},
		"bad bounds":    {Now: t0, MaxKeys: 1, MaxKeysPerOwner: 5, Items: []CallItem{tokenItem("a", 1, 1)}},
		"bad algorithm": {Now: t0, MaxKeys: 10, MaxKeysPerOwner: 5, Items: []CallItem{{Name: "n", Key: "k", Call: window.Call{Alg: window.TokenBucket, Limit: 1, Duration: 1}}}},
	} {
		if _, err := decodeCalls(EncodeCalls(e)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v", name, err)
		}
	}
	b := EncodeCalls(good)
	for i := range b {
		decodeCalls(b[:i]) // never panics
		decodeCalls(flip(b, i))
	}
}

// TestCallsBoundSameOnRestoredReplica: a replica restored from a snapshot
// (which holds live keys only) and one that applied every entry refuse
// the same new keys at the bound, even after a key's expiry was moved
// earlier by a shorter duration, and end with the same digest.
func TestCallsBoundSameOnRestoredReplica(t *testing.T) {
	orig := newTestFSM(t)
	orig.calls(t0, "o", 2, 2, tokenItem("a", 1, 5), tokenItem("b", 1, 5))
	shorter := tokenItem("a", 1, 5)
	shorter.Call.Duration = 1000
	orig.calls(t0+500, "o", 2, 2, shorter)
	restored := newTestFSM(t)
	if err := restored.f.Restore(io.NopCloser(bytes.NewReader(persistSnapshot(t, orig.f).Bytes()))); err != nil {
		t.Fatal(err)
	}
	restored.index = orig.index
	var full []bool
	for _, x := range []*testFSM{orig, restored} {
		r := x.calls(t0+2000, "o", 2, 2, tokenItem("c", 1, 5), tokenItem("a", 1, 5))
		full = append(full, r.Items[0].Full)
		if r.Items[1].Full || r.Items[1].Remaining != 4 {
			t.Fatalf("a, its window ended, starts again: %+v", r.Items[1])
		}
	}
	if full[0] != full[1] {
		t.Fatalf("the replica that applied every entry refused c: %v, the restored one: %v", full[0], full[1])
	}
	if digestOf(orig.f) != digestOf(restored.f) {
		t.Fatal("digests differ")
	}
}
