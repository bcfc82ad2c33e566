package cluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/httpapi/apitest"
	"github.com/rlnode/rlnode/policy"
	"github.com/rlnode/rlnode/window"
)

// TestCheckOneIsOneCallPerHit: the front ends' single call answers with the
// policy it looked up, refuses a cost the table shows can never be allowed
// without writing to the log, decides a hot leased key from the lease, and
// counts a strict hit through the log; a hit never validated is not
// counted.
func TestCheckOneIsOneCallPerHit(t *testing.T) {
	c := apitest.Start(t, 1, clustertest.Options{Limit: 5, Window: time.Minute,
		Policies: []policy.Policy{leasedPolicy("lf", "fixed_window", 100000, time.Hour)}})
	n := c.Leader(5 * time.Second)
	ctx := context.Background()
	check := func(pol, client string, cost int64) (cluster.OneResult, error) {
		t.Helper()
		hit, err := cluster.ValidateHit(pol, client, cost)
		if err != nil {
			t.Fatalf("ValidateHit(%q, %q): %v", pol, client, err)
		}
		var res cluster.OneResult
		err = n.CheckOne(ctx, hit, time.Second, &res)
		return res, err
	}

	before := n.Status().LastLogIndex
	res, err := check("default", "alice", 6)
	if err != nil || !res.Known || !res.NeverAllowed || res.Policy.Limits[res.Beyond].Limit != 5 || len(res.Hits) != 0 {
		t.Fatalf("cost 6 of a limit of 5: %+v %v; want never allowed, from the table", res, err)
	}
	if after := n.Status().LastLogIndex; after != before {
		t.Fatalf("a cost the table refuses wrote %d log entries", after-before)
	}

	res, err = check("default", "alice", 2)
	if err != nil || !res.Allowed || res.Decided != cluster.DecidedLog || res.Hits[0].MainPart().Remaining != 3 || res.Policy.Name != "default" {
		t.Fatalf("strict hit: %+v %v; want allowed through the log with 3 left", res, err)
	}

	clustertest.Poll(t, 10*time.Second, func() error {
		res, err := check("lf", "hot", 1)
		if err != nil || !res.Allowed || res.Decided != cluster.DecidedLocal || res.Hits[0].Outcome != window.Allowed {
			return errorf("hot leased key: %+v %v", res.Decided, err)
		}
		return nil
	})

	res, err = check("nope", "bob", 1)
	if err != nil || res.Known || len(res.Hits) != 1 || !res.Hits[0].UnknownPolicy {
		t.Fatalf("policy not in the table: %+v %v; want the log's unknown policy", res, err)
	}

	if err := n.CheckOne(ctx, cluster.ValidHit{}, time.Second, &res); !errors.Is(err, cluster.ErrNotCounted) {
		t.Fatalf("zero ValidHit: %v; want not counted", err)
	}
	var ih *cluster.InvalidHitError
	if _, err := cluster.ValidateHit("a b", "bob", 1); !errors.As(err, &ih) || ih.Field != "policy" {
		t.Fatalf("policy name with a space: %v; want an invalid policy", err)
	}
	if _, err := cluster.ValidateHit("a b", "bo\x00b", 1); !errors.As(err, &ih) || ih.Field != "client" {
		t.Fatalf("bad client and bad policy: %v; want the client named first", err)
	}
}

// TestCheckOneDecidesAHotLeasedKeyWithoutAllocating: with a result the
// caller reuses, a hot leased key's local decision allocates nothing (the
// average over many decisions, so the node's own background work, a grant
// request now and then, does not count).
func TestCheckOneDecidesAHotLeasedKeyWithoutAllocating(t *testing.T) {
	c := apitest.Start(t, 1, clustertest.Options{Policies: []policy.Policy{leasedPolicy("lf", "fixed_window", policy.MaxLimit, time.Hour)}})
	n := c.Leader(5 * time.Second)
	hit, err := cluster.ValidateHit("lf", "hot", 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var res cluster.OneResult
	clustertest.Poll(t, 10*time.Second, func() error {
		if err := n.CheckOne(ctx, hit, time.Second, &res); err != nil || res.Decided != cluster.DecidedLocal {
			return errorf("hot leased key: decided %q, %v", res.Decided, err)
		}
		return nil
	})
	local := 0
	allocs := testing.AllocsPerRun(2000, func() {
		if n.CheckOne(ctx, hit, time.Second, &res) == nil && res.Decided == cluster.DecidedLocal {
			local++
		}
	})
	if local < 1900 || allocs != 0 {
		t.Fatalf("%d of 2001 decided locally, %v allocations per decision; want nearly all local and none", local, allocs)
	}
}
