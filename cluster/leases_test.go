package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/policy"
)

// The leases without a cluster: the budgets' bench (a real state machine
// that a log of one writer applies to at once, a hand-moved clock) writes
// the lease entries too, and the route is the leader itself.
func (l *budgetBench) applyLease(_ bool, encode func(now int64) []byte) (any, error) {
	return l.applyBudget(encode)
}

// localLeaseRoute is the leader's own route: the operation's input check,
// then the leader's run, as leaderOp.do does on the leader.
type localLeaseRoute struct{ l *Leases }

func (r localLeaseRoute) grant(_ context.Context, w grantWire) (grantWire, error) {
	if err := opGrant.check(w); err != nil {
		return grantWire{}, err
	}
	gs, err := r.l.grantLocal(w.Holder, time.Duration(w.LeaseMs)*time.Millisecond, w.Items)
	return grantWire{Holder: w.Holder, Grants: gs}, err
}

func (r localLeaseRoute) giveBack(_ context.Context, w returnWire) (returnWire, error) {
	if err := opReturn.check(w); err != nil {
		return returnWire{}, err
	}
	got, err := r.l.returnLocal(w.Holder, w.Items)
	return returnWire{Holder: w.Holder, Returned: got}, err
}

// continuousTime is the voters' answer to "do you all continue cluster
// time across a failover".
type continuousTime bool

func (c continuousTime) votersContinueTime() bool { return bool(c) }

func testLeases(t *testing.T, ps ...policy.Policy) (*Leases, *budgetBench) {
	t.Helper()
	bench := &budgetBench{f: fsm.New(fsm.Config{OnFatal: func(err error) { t.Errorf("fsm halted: %v", err) }}), now: 1_700_000_000_000}
	if res := bench.apply(fsm.EncodeSetPolicies(fsm.SetUpsert, ps)); res != nil {
		if err, ok := res.(error); ok {
			t.Fatal(err)
		}
	}
	l := &Leases{log: bench, table: bench, clocks: continuousTime(false), obs: leaseObserver(nil), maxClockOffset: 100 * time.Millisecond}
	l.route = localLeaseRoute{l}
	return l, bench
}

func leased(name, alg string, limit int64, window time.Duration) policy.Policy {
	return policy.Policy{Name: name, Algorithm: alg, Consistency: policy.Leased,
		Limits: []policy.Limit{{Limit: limit, Window: policy.Duration(window)}}}
}

// TestLeasesWithoutACluster: grants take units out of one budget, a
// return puts unspent ones back (only the holder's), a refund takes a
// count down, and a strict or unknown policy lends nothing.
func TestLeasesWithoutACluster(t *testing.T) {
	l, _ := testLeases(t, leased("lf", "fixed_window", 10, time.Minute), leased("lb", "token_bucket", 10, time.Minute),
		policy.Policy{Name: "strict", Algorithm: "fixed_window", Limits: []policy.Limit{{Limit: 10, Window: policy.Duration(time.Minute)}}})
	ctx := context.Background()
	g, err := l.Grant(ctx, GrantRequest{Policy: "lf", Client: "k", Holder: "app-1", Want: 6, Lease: time.Second})
	if err != nil || g.Units != 6 || g.ID == 0 || g.Valid != time.Second || g.Remaining != 4 || g.Algorithm != "fixed_window" {
		t.Fatalf("grant: %+v %v", g, err)
	}
	g2, err := l.Grant(ctx, GrantRequest{Policy: "lf", Client: "k", Holder: "app-2", Want: 6})
	if err != nil || g2.Units != 2 {
		t.Fatalf("second grant: %+v %v; want 2, half of the 4 left", g2, err)
	}
	if got, err := l.Return(ctx, ReturnRequest{Policy: "lf", Client: "k", Holder: "app-2", ID: g.ID, Units: 6}); err != nil || got != 0 {
		t.Fatalf("another holder's return: %d %v; want nothing back", got, err)
	}
	if got, err := l.Return(ctx, ReturnRequest{Policy: "lf", Client: "k", Holder: "app-1", ID: g.ID, Units: 5}); err != nil || got != 5 {
		t.Fatalf("return: %d %v; want 5 back", got, err)
	}
	// A token bucket's grant is usable the clock bound less than its lease,
	// and LeaseFor asks that much longer.
	gb, err := l.Grant(ctx, GrantRequest{Policy: "lb", Client: "k", Holder: "app-1", Want: 3, Lease: l.LeaseFor(true, time.Second)})
	if err != nil || gb.Units != 3 || gb.Valid != 1100*time.Millisecond || gb.UsableFor >= gb.Valid {
		t.Fatalf("token bucket grant: %+v %v", gb, err)
	}
	if _, err := l.Grant(ctx, GrantRequest{Policy: "strict", Client: "k", Holder: "h", Want: 1}); !errors.Is(err, ErrNotLeased) {
		t.Fatalf("grant of a strict policy: %v, want ErrNotLeased", err)
	}
	if _, err := l.Grant(ctx, GrantRequest{Policy: "nope", Client: "k", Holder: "h", Want: 1}); !errors.Is(err, ErrUnknownPolicy) {
		t.Fatalf("grant of an unknown policy: %v, want ErrUnknownPolicy", err)
	}
	if _, err := l.Grant(ctx, GrantRequest{Policy: "lf", Client: "k", Holder: "", Want: 1}); !errors.Is(err, ErrNotCounted) {
		t.Fatalf("grant without a holder: %v, want not counted", err)
	}
	// No node holder here: a refund goes through the log only; bad input
	// refunds nothing, and a key holders hold units of is not refunded.
	if _, err := l.Refund(ctx, []Hit{{Policy: "lf", Client: "", Cost: 1}}); !errors.Is(err, ErrNotCounted) {
		t.Fatalf("refund without a client: %v, want not counted", err)
	}
	if got, err := l.Refund(ctx, []Hit{{Policy: "lf", Client: "k", Cost: 3}}); err != nil || len(got) != 1 || got[0] != 0 {
		t.Fatalf("refund of a held key: %v %v, want 0 refunded", got, err)
	}
}
