package fsm

import (
	"bytes"
	"encoding/hex"
	"io"
	"testing"

	"github.com/rlnode/rlnode/window"
)

// callFixture builds the state testdata/r5-calls-snapshot.bin holds: a
// token key of 5 with 2 taken and a leaky key of 10 with 4 taken, at t0.
func callFixture(t *testing.T) *testFSM {
	tf := newTestFSM(t)
	tf.calls(t0, "alice", 100, 10, tokenItem("a", 2, 5),
		CallItem{Name: "lk", Key: "k", Call: window.Call{Alg: window.LeakyBucket, Hits: 4, Limit: 10, Duration: 10_000}})
	return tf
}

// TestRestoreCallsSnapshot: a snapshot holding per-call keys (this
// release's output; regenerate with RLNODE_WRITE_FIXTURES=1 only on a
// format change that keeps reading the old one) stays readable, with the
// keys deciding where they left off and counted for their owner.
func TestRestoreCallsSnapshot(t *testing.T) {
	b := snapshotFixture(t, "r5-calls-snapshot.bin", callFixture)
	tf := newTestFSM(t)
	if err := tf.f.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		t.Fatal(err)
	}
	tf.index = tf.f.Stats().AppliedIndex
	if tf.f.calls.byOwner[callOwnerID("alice")] != 2 {
		t.Fatalf("counts after restore: %+v", tf.f.calls)
	}
	r := tf.calls(t0+1000, "alice", 100, 10, tokenItem("a", 1, 5),
		CallItem{Name: "lk", Key: "k", Call: window.Call{Alg: window.LeakyBucket, Hits: 1, Limit: 10, Duration: 10_000}})
	if r.Items[0].Remaining != 2 || r.Items[1].Remaining != 6 {
		t.Fatalf("after restore: %+v", r.Items)
	}
}

// TestCallEntryKeepsItsBytes: a calls entry a log holds must decode and
// decide the same in every later release.
func TestCallEntryKeepsItsBytes(t *testing.T) {
	e := CallsEntry{Now: t0, Owner: "o", MaxKeys: 100, MaxKeysPerOwner: 10, Items: []CallItem{
		tokenItem("a", 2, 5),
		{Name: "lk", Key: "k", Call: window.Call{Alg: window.LeakyBucket, Hits: 4, Limit: 10, Duration: 10_000, Burst: 12, DrainOverLimit: true, Gregorian: false}},
		{Name: "g", Key: "k", Call: window.Call{Alg: window.CallTokenBucket, Hits: 1, Limit: 3, Duration: window.GregorianDays, Gregorian: true, ResetRemaining: true}},
	}}
	const want = "140180a0abfef962016f640a030361706901610a000205e0d40300026c6b016b0b04040a904e0c0167016b0a0301030200"
	got := hex.EncodeToString(EncodeCalls(e))
	if got != want {
		t.Fatalf("the entry encodes as %s, was %s: a log written before would decode differently", got, want)
	}
	b, _ := hex.DecodeString(want)
	if err := CheckEntry(b); err != nil {
		t.Fatal(err)
	}
	r := newTestFSM(t).apply(1, b).(*CallsResult)
	if r.Items[0].Remaining != 3 || r.Items[1].Remaining != 8 || r.Items[2].Remaining != 2 {
		t.Fatalf("decided %+v", r.Items)
	}
}
