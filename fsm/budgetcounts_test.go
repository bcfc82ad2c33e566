package fsm

import (
	"bytes"
	"fmt"
	"io"
	"testing"
	"time"
)

// scanCounts is what the counts must say, counted the slow way.
func scanCounts(f *FSM) (byOwner map[string]int64, byPolicy map[string]int64, reservedByOwner map[string]int64) {
	byOwner, byPolicy, reservedByOwner = map[string]int64{}, map[string]int64{}, map[string]int64{}
	for name, p := range f.policies {
		if p.p.IsConcurrency() {
			byPolicy[name] = 0
		}
	}
	for key, ps := range f.permits {
		for _, pm := range ps {
			byOwner[pm.owner]++
			if p := f.policies[policyOf(key)]; p != nil && p.epoch == pm.epoch && p.p.IsConcurrency() {
				byPolicy[policyOf(key)]++
			}
		}
	}
	for _, r := range f.reservations {
		reservedByOwner[r.owner] += reservedBytes(r.items)
	}
	return byOwner, byPolicy, reservedByOwner
}

func checkCounts(t *testing.T, f *FSM, when string) {
	t.Helper()
	byOwner, byPolicy, reserved := scanCounts(f)
	for o, n := range byOwner {
		if got := f.PermitsOfOwner(o); got != n {
			t.Errorf("%s: PermitsOfOwner(%q) %d, a scan says %d", when, o, got, n)
		}
	}
	if got := f.PermitsByPolicy(); fmt.Sprint(got) != fmt.Sprint(byPolicy) {
		t.Errorf("%s: PermitsByPolicy %v, a scan says %v", when, got, byPolicy)
	}
	total := int64(0)
	for o, n := range reserved {
		total += n
		if got := f.ReservedBytesOfOwner(o); got != n {
			t.Errorf("%s: ReservedBytesOfOwner(%q) %d, a scan says %d", when, o, got, n)
		}
	}
	if got := f.ReservedBytes(); got != total {
		t.Errorf("%s: ReservedBytes %d, a scan says %d", when, got, total)
	}
	if len(f.permitHeap) != len(f.permitKey) {
		t.Errorf("%s: %d expiry items for %d permits", when, len(f.permitHeap), len(f.permitKey))
	}
}

// TestBudgetCountsFollowEveryTransition: the counts kept on apply agree
// with a scan after acquires, renewals, releases, expiry, a policy
// deleted and made again, reservations and a restore; and the expiry heap
// holds one item per stored permit (issue 35, item 6: a release or renew
// left its item until the TTL).
func TestBudgetCountsFollowEveryTransition(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(conc("jobs", 1000), conc("idle", 1), pol("in", "fixed_window", lim(1000, time.Hour)))
	now := t0
	for i := range 300 {
		owner := fmt.Sprintf("o%d", i%3)
		if r := tf.acquire(now, i+1, owner, fmt.Sprintf("c%d", i%7), int64(1000+i*10)); !r.Acquired {
			t.Fatalf("acquire %d: %+v", i, r)
		}
		switch i % 3 {
		case 0:
			tf.permit(PermitEntry{Now: now, Op: PermitRelease, ID: testID(i + 1), Owner: owner})
		case 1:
			tf.permit(PermitEntry{Now: now, Op: PermitRenew, ID: testID(i + 1), Owner: owner, TTLMs: 5000})
		}
		if i%10 == 0 {
			tf.reserve(now, 10_000+i, owner, 2000, ReserveItem{"in", fmt.Sprintf("k%d", i), 1})
		}
		now += 7
	}
	checkCounts(t, tf.f, "after churn")
	tf.acquire(now+3000, 99_999, "o1", "late", 1000) // sweeps what came due
	checkCounts(t, tf.f, "after expiry")
	tf.apply(1, EncodeDeletePolicy("jobs"))
	tf.set(conc("jobs", 5))
	checkCounts(t, tf.f, "after the policy was made again")
	sink := persistSnapshot(t, tf.f)
	other := newTestFSM(t)
	if err := other.f.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, other.f, "after a restore")
}
