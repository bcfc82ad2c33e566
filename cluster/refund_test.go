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
)

// TestRefundNotCountedGivesNothingBack: a refund refused as not counted
// (here for a malformed hit beside a good one) must not have given units
// back into this node's grants: a caller that retries a not-counted
// refund would give them back twice. (Failed before the fix: the good
// hit's unit went back into the grant before the log part was refused,
// so a later refund found one spent unit fewer.)
func TestRefundNotCountedGivesNothingBack(t *testing.T) {
	c := apitest.Start(t, 1, clustertest.Options{Policies: []policy.Policy{
		leasedPolicy("lr", "fixed_window", 1000, time.Hour),
	}})
	n := c.Leader(10 * time.Second)
	ctx := context.Background()
	local := int64(0)
	for deadline := time.Now().Add(10 * time.Second); local < 5; {
		if time.Now().After(deadline) {
			t.Fatalf("the key was decided locally %d times, want 5", local)
		}
		res, err := n.Check(ctx, "lr", "hot", 1)
		if err != nil || !res.Allowed {
			t.Fatalf("check: %+v %v", res, err)
		}
		if res.Decided == cluster.DecidedLocal {
			local++
		}
	}
	_, err := n.Leases().Refund(ctx, []cluster.Hit{{Policy: "lr", Client: "hot", Cost: 1}, {Policy: "lr", Client: "", Cost: 1}})
	if !errors.Is(err, cluster.ErrNotCounted) {
		t.Fatalf("refund with a malformed hit: %v, want not counted", err)
	}
	// Every unit spent from the grants goes back locally; the log part
	// gives nothing while grants of the key are held.
	got, err := n.Leases().Refund(ctx, []cluster.Hit{{Policy: "lr", Client: "hot", Cost: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != local {
		t.Fatalf("refunded %d after a not-counted refund, want the %d units spent locally", got[0], local)
	}
}

// TestRefundThatMissesTheLogAfterGivingBackLocallyIsNotNotCounted: a
// refund whose local part went back into this node's grants and whose log
// part found no leader must not say not counted (a retry would give the
// local part back twice). (Failed before the fix: not counted.)
func TestRefundThatMissesTheLogAfterGivingBackLocallyIsNotNotCounted(t *testing.T) {
	c := apitest.Start(t, 3, clustertest.Options{Policies: []policy.Policy{
		leasedPolicy("lr", "fixed_window", 1000, time.Hour),
		{Name: "strict", Algorithm: "fixed_window", Limits: []policy.Limit{{Limit: 1000, Window: policy.Duration(time.Hour)}}},
	}})
	n := c.Leader(10 * time.Second)
	ctx := context.Background()
	if _, err := n.Check(ctx, "strict", "k", 1); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if time.Now().After(deadline) {
			t.Fatal("the key was never decided locally")
		}
		if res, err := n.Check(ctx, "lr", "hot", 1); err == nil && res.Decided == cluster.DecidedLocal {
			break
		}
	}
	for _, o := range c.Live() {
		if o.ID != n.ID {
			o.Stop()
		}
	}
	for n.IsLeader() {
		time.Sleep(5 * time.Millisecond)
	}
	_, err := n.Leases().Refund(ctx, []cluster.Hit{{Policy: "lr", Client: "hot", Cost: 1}, {Policy: "strict", Client: "k", Cost: 1}})
	if err == nil || errors.Is(err, cluster.ErrNotCounted) {
		t.Fatalf("refund after giving a unit back locally, with no leader: %v, want an error that is not not-counted", err)
	}
}
