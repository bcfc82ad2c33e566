package fsm

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
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
	path := filepath.Join("testdata", "r5-calls-snapshot.bin")
	if os.Getenv("RLNODE_WRITE_FIXTURES") == "1" {
		if err := os.WriteFile(path, persistSnapshot(t, callFixture(t).f).Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
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
