package fsm

import (
	"bytes"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// v4Fixture builds the state testdata/v4-snapshot.bin holds: a permit of
// alice, a reservation of 40 of 100 units, at t0.
func v4Fixture(t *testing.T) *testFSM {
	tf := newTestFSM(t)
	tf.set(conc("jobs", 2), pol("tok", "fixed_window", lim(100, time.Hour)))
	tf.acquire(t0, 1, "alice", "c", 3_600_000)
	tf.reserve(t0, 7, "alice", 3_600_000, ReserveItem{"tok", "c", 40})
	return tf
}

// TestRestoreVersion4Snapshot: the snapshot this release writes with live
// permits and reservations stays readable (the fixture is this release's
// output; regenerate with RLNODE_WRITE_FIXTURES=1 only on a format change
// that keeps reading the old one).
func TestRestoreVersion4Snapshot(t *testing.T) {
	b := snapshotFixture(t, "v4-snapshot.bin", v4Fixture)
	if b[4] != snapshotV4 {
		t.Fatalf("fixture is version %d", b[4])
	}
	tf := newTestFSM(t)
	if err := tf.f.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		t.Fatal(err)
	}
	tf.index = tf.f.Stats().AppliedIndex
	if ps := tf.f.LivePermits(); len(ps) != 1 || ps[0].ID != testID(1) || ps[0].Owner != "alice" || ps[0].Exp != t0+3_600_000 {
		t.Fatalf("permits after restore: %+v", ps)
	}
	if r := tf.settle(t0+10, 7, "alice", 15); r.NotFound || r.Refunded[0] != 25 {
		t.Fatalf("settle of the restored reservation: %+v", r)
	}
	if r := tf.check(t0+10, nil, h2("tok", "c", 86)).Hits[0]; r.Counted {
		t.Fatal("86 more of 100 with 15 settled")
	}
	if digestOf(v4Fixture(t).f) == 0 {
		t.Fatal("no digest")
	}
}

// TestPermitEntriesKeepTheirBytes: the entries a log holds must decode and
// apply the same in every later release; these are their bytes as this
// release writes them.
func TestPermitEntriesKeepTheirBytes(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(conc("jobs", 2), pol("tok", "fixed_window", lim(100, time.Hour)))
	for i, g := range []struct {
		hex  string
		data []byte
	}{
		{"0a0180a0abfef962012030303030303030303030303030303030303030303030303030303030303030310161046a6f62730163b0ea01",
			EncodePermit(PermitEntry{Now: t0, Op: PermitAcquire, ID: testID(1), Owner: "a", Policy: "jobs", Client: "c", TTLMs: 30_000})},
		{"0b0180a0abfef9620120303030303030303030303030303030303030303030303030303030303030303200e8070103746f6b016328",
			EncodeReservation(ReservationEntry{Now: t0, Op: ReservationReserve, ID: testID(2), TTLMs: 1000, Items: []ReserveItem{{"tok", "c", 40}}})},
		{"0b0180a0abfef96202203030303030303030303030303030303030303030303030303030303030303032000f",
			EncodeReservation(ReservationEntry{Now: t0, Op: ReservationSettle, ID: testID(2), Units: 15})},
		{"0a0180a0abfef962040000046a6f62730163",
			EncodePermit(PermitEntry{Now: t0, Op: PermitReleaseOldest, Policy: "jobs", Client: "c"})},
	} {
		if got := hex.EncodeToString(g.data); got != g.hex {
			t.Fatalf("entry %d encodes as %s, was %s: a log written before would decode differently", i, got, g.hex)
		}
		b, _ := hex.DecodeString(g.hex)
		if err := CheckEntry(b); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		switch r := tf.apply(1, b).(type) {
		case *PermitResult:
			if !r.Acquired && r.ID != testID(1) {
				t.Fatalf("entry %d: %+v", i, r)
			}
		case *ReservationResult:
			if !r.Reserved && (r.Refunded == nil || r.Refunded[0] != 25) {
				t.Fatalf("entry %d: %+v", i, r)
			}
		default:
			t.Fatalf("entry %d applied as %T (fatal %v)", i, r, tf.fatal)
		}
	}
	if len(tf.f.LivePermits()) != 0 {
		t.Fatal("the release-oldest entry left the permit")
	}
}

// snapshotFixture is testdata/name, a snapshot this release wrote of
// build's state machine; with RLNODE_WRITE_FIXTURES=1 it is written anew
// first (only on a format change that keeps reading the old one).
func snapshotFixture(t *testing.T, name string, build func(*testing.T) *testFSM) []byte {
	t.Helper()
	path := filepath.Join("testdata", name)
	if os.Getenv("RLNODE_WRITE_FIXTURES") == "1" {
		if err := os.WriteFile(path, persistSnapshot(t, build(t).f).Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
