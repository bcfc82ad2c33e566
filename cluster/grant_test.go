package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/httpapi/apitest"
	"github.com/rlnode/rlnode/lease"
	"github.com/rlnode/rlnode/policy"
)

func leasedPolicy(name, alg string, limit int64, window time.Duration) policy.Policy {
	return policy.Policy{Name: name, Algorithm: alg, Consistency: policy.Leased,
		Limits: []policy.Limit{{Limit: limit, Window: policy.Duration(window)}}}
}

// TestGrantAPIThroughLeaderAndFollower: grants from any node take units
// out of one budget, returns put unspent ones back, only to their holder.
func TestGrantAPIThroughLeaderAndFollower(t *testing.T) {
	c := apitest.Start(t, 3, clustertest.Options{Policies: []policy.Policy{
		leasedPolicy("lf", "fixed_window", 10, time.Minute), leasedPolicy("lb", "token_bucket", 10, time.Minute)}})
	leader := c.Leader(5 * time.Second)
	follower := c.Followers(leader)[0]
	ctx := context.Background()
	sent := time.Now()
	g, err := follower.Leases().Grant(ctx, cluster.GrantRequest{Policy: "lf", Client: "k", Holder: "app-1", Want: 6, Lease: time.Second})
	if err != nil || g.Units != 6 || g.ID == 0 || g.Valid != time.Second || g.Remaining != 4 {
		t.Fatalf("grant via follower: %+v %v", g, err)
	}
	if left := g.Deadline(sent).Left(sent); left >= time.Second || left < 990*time.Millisecond {
		t.Fatalf("deadline %s after send, want a little under 1s", left)
	}
	// A holder paused past the lease finds the deadline passed.
	if !g.Deadline(sent).Passed(sent.Add(time.Second)) {
		t.Fatal("the deadline has not passed a second after the send")
	}
	// A token bucket's grant is usable for less: its cap lifts at expiry in
	// cluster time, which a clock jump at a failover can move earlier.
	gb, err := follower.Leases().Grant(ctx, cluster.GrantRequest{Policy: "lb", Client: "k", Holder: "app-1", Want: 3, Lease: 2 * time.Second})
	if want := 2*time.Second - 2*time.Millisecond*lease.MarginPPM/1000 - lease.MarginFixed - 500*time.Millisecond; err != nil || gb.Units != 3 || gb.UsableFor != want {
		t.Fatalf("token bucket grant: %+v %v; want usable for %s", gb, err, want)
	}
	g2, err := leader.Leases().Grant(ctx, cluster.GrantRequest{Policy: "lf", Client: "k", Holder: "app-2", Want: 6})
	// 4 left; app-1's outstanding grant wanted 6 too: a fair share is 2.
	if err != nil || g2.Units != 2 || g2.WindowStart != g.WindowStart {
		t.Fatalf("second grant: %+v %v; want 2, half of the 4 left, in the first grant's window %d", g2, err, g.WindowStart)
	}
	g3, err := leader.Leases().Grant(ctx, cluster.GrantRequest{Policy: "lf", Client: "k", Holder: "app-2", Want: 6})
	if err != nil || g3.Units != 1 {
		t.Fatalf("third grant: %+v %v; want 1 (2 left, wants 6 against 12)", g3, err)
	}
	leader.Leases().Grant(ctx, cluster.GrantRequest{Policy: "lf", Client: "k", Holder: "app-2", Want: 6})
	if res, err := leader.Check(ctx, "lf", "k", 1); err != nil || res.Allowed {
		t.Fatalf("a strict hit with the budget lent out: %+v %v", res, err)
	}
	if got, err := follower.Leases().Return(ctx, cluster.ReturnRequest{Policy: "lf", Client: "k", Holder: "app-2", ID: g.ID, Units: 6}); err != nil || got != 0 {
		t.Fatalf("app-2 returned app-1's grant: %d %v", got, err)
	}
	if got, err := follower.Leases().Return(ctx, cluster.ReturnRequest{Policy: "lf", Client: "k", Holder: "app-1", ID: g.ID, Units: 5}); err != nil || got != 5 {
		t.Fatalf("return: %d %v", got, err)
	}
	if res, err := follower.Check(ctx, "lf", "k", 5); err != nil || !res.Allowed {
		t.Fatalf("returned units are not back: %+v %v", res, err)
	}
	if _, err := follower.Leases().Grant(ctx, cluster.GrantRequest{Policy: "default", Client: "k", Holder: "h", Want: 1}); !errors.Is(err, cluster.ErrNotLeased) {
		t.Fatalf("grant of a strict policy: %v", err)
	}
	if _, err := follower.Leases().Grant(ctx, cluster.GrantRequest{Policy: "nope", Client: "k", Holder: "h", Want: 1}); !errors.Is(err, cluster.ErrUnknownPolicy) {
		t.Fatalf("grant of an unknown policy: %v", err)
	}
	if _, err := follower.Leases().Grant(ctx, cluster.GrantRequest{Policy: "lf", Client: "k", Holder: "", Want: 1}); err == nil {
		t.Fatal("a grant without a holder was accepted")
	}
	c.WaitConverged(5 * time.Second)
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
