package fsm

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/policy"
)

// v1Snapshot returns the version-1 snapshot inside the old-data fixture
// (cmd/rlnode/testdata/v1-data.tar.gz, written by the release before
// policies: alice 3 hits and bob 1 of a 5 per 1h window).
func v1Snapshot(t *testing.T) []byte {
	f, err := os.Open(filepath.Join("..", "cmd", "rlnode", "testdata", "v1-data.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("no state.bin in the fixture: %v", err)
		}
		if strings.HasSuffix(h.Name, "/state.bin") {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}

func TestRestoreVersion1Snapshot(t *testing.T) {
	tf := newTestFSM(t)
	if err := tf.f.Restore(io.NopCloser(bytes.NewReader(v1Snapshot(t)))); err != nil {
		t.Fatal(err)
	}
	if tf.f.Seeded() || len(tf.f.Policies()) != 0 {
		t.Fatal("a version-1 snapshot came with a policy table")
	}
	now := tf.f.Stats().AppliedNow
	// The first leader seeds default from its flags; the windows it finds
	// are the old ones when the window length matches.
	tf.index = tf.f.Stats().AppliedIndex
	tf.apply(2, EncodeSetPolicies(SetSeed, []policy.Policy{policy.Fixed(policy.Default, 5, time.Hour)}))
	v, ok := tf.f.Lookup(policy.Default, "alice")
	if !ok || !v.Stored || v.States[0].B != 3 {
		t.Fatalf("alice after restore and seed: %+v %v; want 3 hits stored", v, ok)
	}
	r := tf.check(now+1, nil, h2(policy.Default, "bob", 1)).Hits[0]
	if !r.Counted || r.Parts[0].Remaining != 3 {
		t.Fatalf("bob's next hit: %+v; want allowed with 3 left of 5", r)
	}
	// A snapshot of the upgraded state is the current version and restores equal.
	sink := persistSnapshot(t, tf.f)
	if sink.Bytes()[4] != snapshotV3 {
		t.Fatalf("snapshot version %d, want %d", sink.Bytes()[4], snapshotV3)
	}
	other := newTestFSM(t)
	if err := other.f.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if digestOf(other.f) != digestOf(tf.f) {
		t.Fatal("version-3 round trip of upgraded state changed the digest")
	}
}
