package fsm

import (
	"bytes"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/rlnode/rlnode/policy"
)

func conc(name string, n int64) policy.Policy {
	return policy.Policy{Name: name, Algorithm: policy.Concurrency, Limits: []policy.Limit{{Limit: n}}}
}

func testID(i int) string { return fmt.Sprintf("%032x", i) }

func (tf *testFSM) permit(e PermitEntry) *PermitResult {
	tf.t.Helper()
	r, ok := tf.apply(1, EncodePermit(e)).(*PermitResult)
	if !ok {
		tf.t.Fatalf("permit entry did not return *PermitResult (fatal %v)", tf.fatal)
	}
	return r
}

func (tf *testFSM) acquire(now int64, id int, owner, client string, ttlMs int64) *PermitResult {
	tf.t.Helper()
	return tf.permit(PermitEntry{Now: now, Op: PermitAcquire, ID: testID(id), Owner: owner, Policy: "jobs", Client: client, TTLMs: ttlMs})
}

func TestPermitAcquireRefusesPastTheLimit(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(conc("jobs", 2))
	a := tf.acquire(t0, 1, "alice", "c", 1000)
	b := tf.acquire(t0+10, 2, "alice", "c", 500)
	if !a.Acquired || !b.Acquired || a.Exp != t0+1000 || b.Live != 2 || b.Limit != 2 {
		t.Fatalf("acquires %+v %+v", a, b)
	}
	c := tf.acquire(t0+20, 3, "alice", "c", 1000)
	if c.Acquired || c.RetryAt != t0+510 || c.Live != 2 {
		t.Fatalf("third of 2: %+v, want refused until %d", c, t0+510)
	}
	if d := tf.acquire(t0+20, 4, "alice", "other", 1000); !d.Acquired {
		t.Fatalf("another client's key is its own budget: %+v", d)
	}
	if n := len(tf.f.LivePermits()); n != 3 {
		t.Fatalf("%d live permits, want 3", n)
	}
}

func TestPermitExpiresAtItsTTL(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(conc("jobs", 1))
	tf.acquire(t0, 1, "", "c", 1000)
	if r := tf.acquire(t0+999, 2, "", "c", 1000); r.Acquired {
		t.Fatalf("acquired before the first permit's TTL: %+v", r)
	}
	if r := tf.acquire(t0+1000, 3, "", "c", 1000); !r.Acquired || r.Live != 1 {
		t.Fatalf("not acquired at the first permit's TTL: %+v", r)
	}
	if r := tf.permit(PermitEntry{Now: t0 + 1001, Op: PermitRelease, ID: testID(1)}); !r.NotFound {
		t.Fatalf("released an expired permit: %+v", r)
	}
}

func TestPermitReleaseAndRenewNeedTheOwner(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(conc("jobs", 1))
	tf.acquire(t0, 1, "alice", "c", 1000)
	for _, op := range []PermitOp{PermitRelease, PermitRenew} {
		if r := tf.permit(PermitEntry{Now: t0 + 1, Op: op, ID: testID(1), Owner: "mallory", TTLMs: 5000}); !r.NotFound {
			t.Fatalf("op %d by another owner: %+v", op, r)
		}
	}
	r := tf.permit(PermitEntry{Now: t0 + 500, Op: PermitRenew, ID: testID(1), Owner: "alice", TTLMs: 2000})
	if r.NotFound || r.Exp != t0+2500 {
		t.Fatalf("renew: %+v, want expiry %d", r, t0+2500)
	}
	if r := tf.acquire(t0+1500, 2, "bob", "c", 1000); r.Acquired || r.RetryAt != t0+2500 {
		t.Fatalf("acquired while the renewed permit lives: %+v", r)
	}
	if r := tf.permit(PermitEntry{Now: t0 + 1600, Op: PermitRelease, ID: testID(1), Owner: "alice"}); r.NotFound || r.Live != 0 {
		t.Fatalf("release: %+v", r)
	}
	if r := tf.permit(PermitEntry{Now: t0 + 1601, Op: PermitRelease, ID: testID(1), Owner: "alice"}); !r.NotFound {
		t.Fatalf("second release: %+v", r)
	}
	if r := tf.acquire(t0+1602, 3, "bob", "c", 1000); !r.Acquired {
		t.Fatalf("not acquired after the release: %+v", r)
	}
	// A renew never shortens, and a dead permit cannot come back.
	if r := tf.permit(PermitEntry{Now: t0 + 1700, Op: PermitRenew, ID: testID(3), Owner: "bob", TTLMs: 1}); r.Exp != t0+2602 {
		t.Fatalf("renew shortened the permit: %+v", r)
	}
	if r := tf.permit(PermitEntry{Now: t0 + 2602, Op: PermitRenew, ID: testID(3), Owner: "bob", TTLMs: 1000}); !r.NotFound {
		t.Fatalf("renewed a permit at its expiry: %+v", r)
	}
}

func TestPermitReleaseOldest(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(conc("jobs", 3))
	for i := 1; i <= 3; i++ {
		tf.acquire(t0+int64(i), i, "rls", "c", 1000)
	}
	r := tf.permit(PermitEntry{Now: t0 + 10, Op: PermitReleaseOldest, Owner: "rls", Policy: "jobs", Client: "c"})
	if r.NotFound || r.ID != testID(1) || r.Live != 2 {
		t.Fatalf("release oldest: %+v", r)
	}
	if r := tf.permit(PermitEntry{Now: t0 + 10, Op: PermitReleaseOldest, Policy: "jobs", Client: "none"}); !r.NotFound {
		t.Fatalf("release oldest of an empty key: %+v", r)
	}
}

func TestPermitPolicyChecksAndLimitChanges(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(conc("jobs", 2), pol("fw", "fixed_window", lim(5, time.Second)))
	if r := tf.permit(PermitEntry{Now: t0, Op: PermitAcquire, ID: testID(1), Policy: "fw", Client: "c", TTLMs: 10}); !r.NotConcurrency || r.Acquired {
		t.Fatalf("permit of a window policy: %+v", r)
	}
	if r := tf.permit(PermitEntry{Now: t0, Op: PermitAcquire, ID: testID(1), Policy: "nope", Client: "c", TTLMs: 10}); !r.UnknownPolicy {
		t.Fatalf("permit of an unknown policy: %+v", r)
	}
	tf.acquire(t0, 1, "", "c", 1000)
	tf.acquire(t0, 2, "", "c", 1000)
	tf.set(conc("jobs", 1)) // lowered below the live count
	if r := tf.acquire(t0+1, 3, "", "c", 1000); r.Acquired {
		t.Fatalf("acquired past a lowered limit: %+v", r)
	}
	tf.apply(1, EncodeDeletePolicy("jobs"))
	tf.set(conc("jobs", 1))
	if r := tf.acquire(t0+2, 4, "", "c", 1000); !r.Acquired {
		t.Fatalf("a new incarnation of the policy kept the old permits: %+v", r)
	}
}

func TestSnapshotCarriesPermitsAndReservations(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(conc("jobs", 2), pol("tok", "fixed_window", lim(100, time.Minute)))
	if sink := persistSnapshot(t, tf.f); sink.Bytes()[4] != snapshotV3 {
		t.Fatalf("a snapshot without permits is version %d, want 3 (readable by the previous release)", sink.Bytes()[4])
	}
	tf.acquire(t0, 1, "alice", "c", 5000)
	tf.reserve(t0, 7, "alice", 5000, ReserveItem{"tok", "c", 40})
	sink := persistSnapshot(t, tf.f)
	if sink.Bytes()[4] != snapshotV4 {
		t.Fatalf("snapshot version %d", sink.Bytes()[4])
	}
	other := newTestFSM(t)
	if err := other.f.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	other.index = tf.index
	if digestOf(other.f) != digestOf(tf.f) || len(other.f.LivePermits()) != 1 || len(other.f.Reservations()) != 1 {
		t.Fatalf("restored %+v %+v", other.f.LivePermits(), other.f.Reservations())
	}
	for _, x := range []*testFSM{tf, other} {
		if r := x.acquire(t0+1, 2, "bob", "c", 1000); !r.Acquired {
			t.Fatalf("second permit: %+v", r)
		}
		if r := x.acquire(t0+2, 3, "bob", "c", 1000); r.Acquired {
			t.Fatalf("third permit of 2 after a restore: %+v", r)
		}
		if r := x.settle(t0+3, 7, "alice", 10); r.NotFound || r.Refunded[0] != 30 {
			t.Fatalf("settle after a restore: %+v", r)
		}
		x.permit(PermitEntry{Now: t0 + 6000, Op: PermitReleaseOldest, Policy: "jobs", Client: "c"})
	}
	if digestOf(other.f) != digestOf(tf.f) {
		t.Fatal("replicas diverged after the restore")
	}
	// Corrupt the permit section: the restore refuses and changes nothing.
	bad := bytes.Clone(sink.Bytes())
	bad[len(bad)-10] ^= 0xff
	if err := newTestFSM(t).f.Restore(io.NopCloser(bytes.NewReader(bad))); err == nil {
		t.Fatal("restored a corrupt version 4 snapshot")
	}
}

func TestPermitEntriesThatCannotDecodeHalt(t *testing.T) {
	for name, e := range map[string]PermitEntry{
		"ttl over the maximum": {Now: t0, Op: PermitAcquire, ID: testID(1), Policy: "jobs", Client: "c", TTLMs: MaxPermitTTLMs + 1},
		"short id":             {Now: t0, Op: PermitRelease, ID: "abc"},
		"unknown op":           {Now: t0, Op: 9, ID: testID(1)},
	} {
		if e.Validate() == nil {
			t.Errorf("%s: valid", name)
		}
		tf := newTestFSM(t)
		tf.apply(1, EncodePermit(e))
		if len(tf.fatal) != 1 {
			t.Errorf("%s: applied without halting", name)
		}
	}
}

// TestPermitsAreBoundedAcrossKeys: one caller spreading acquires over many
// client keys fills the state to maxPermits (lowered here); the next
// acquire, of a fresh key under its own limit, is refused as Full and
// stores nothing, on every replica alike (the refusal depends only on the
// state and the entry). Expired permits do not count: once they lapse the
// same acquire goes through. (Failed before the bound: the acquire past it
// was taken.)
func TestPermitsAreBoundedAcrossKeys(t *testing.T) {
	tf, twin := newTestFSM(t), newTestFSM(t)
	for _, x := range []*testFSM{tf, twin} {
		x.f.maxPermits = 3
		x.set(conc("jobs", 100))
		for i := range 3 {
			if r := x.acquire(t0, i+1, "alice", fmt.Sprintf("c%d", i), int64(1000*(i+1))); !r.Acquired {
				t.Fatalf("acquire %d under the bound: %+v", i, r)
			}
		}
	}
	before := tf.f.LivePermits()
	r := tf.acquire(t0+10, 9, "alice", "fresh", 1000)
	if r.Acquired || !r.Full || r.Live != 0 || r.Limit != 100 {
		t.Fatalf("acquire past the bound: %+v, want refused as Full", r)
	}
	if after := tf.f.LivePermits(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("the refused acquire changed the state:\n%v\nwant\n%v", after, before)
	}
	if r := tf.permit(PermitEntry{Now: t0 + 10, Op: PermitRelease, ID: testID(9), Owner: "alice"}); !r.NotFound {
		t.Fatalf("the refused permit can be released: %+v", r)
	}
	if r2 := twin.acquire(t0+10, 9, "alice", "fresh", 1000); fmt.Sprint(r2) != fmt.Sprint(r) {
		t.Fatalf("replicas answered the same entry differently: %+v and %+v", r, r2)
	}
	// The first permit's TTL ends at t0+1000: it no longer counts.
	if r := tf.acquire(t0+1000, 10, "alice", "fresh", 1000); !r.Acquired || r.Full {
		t.Fatalf("acquire once a permit expired: %+v", r)
	}
	if n := len(tf.f.LivePermits()); n != 3 {
		t.Fatalf("%d live permits, want 3", n)
	}
}
