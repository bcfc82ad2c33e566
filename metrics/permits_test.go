package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/metrics"
	"github.com/rlnode/rlnode/policy"
)

// TestPermitsLivePerPolicy: rlnode_permits_live{policy} counts the live
// permits of each concurrency policy (0 for one with none, no series for
// a policy that counts hits), and drops as a permit is released.
func TestPermitsLivePerPolicy(t *testing.T) {
	concurrency := func(name string, n int64) policy.Policy {
		return policy.Policy{Name: name, Algorithm: policy.Concurrency, Limits: []policy.Limit{{Limit: n}}}
	}
	c := clustertest.Start(t, 1, clustertest.Options{Policies: []policy.Policy{concurrency("jobs", 5), concurrency("idle", 1)}})
	node := c.Leader(5 * time.Second)
	reg := prometheus.NewRegistry()
	metrics.New(reg).WatchPermits(node.Budgets())
	var first cluster.Permit
	for i := range 3 {
		p, err := node.Budgets().AcquirePermit(context.Background(), cluster.PermitRequest{Policy: "jobs", Client: "u", TTL: time.Minute})
		if err != nil || !p.Acquired {
			t.Fatalf("acquire %d: %+v %v", i, p, err)
		}
		if i == 0 {
			first = p
		}
	}
	if got := permitsLive(t, reg); len(got) != 2 || got["jobs"] != 3 || got["idle"] != 0 {
		t.Fatalf("rlnode_permits_live with 3 of jobs live: %v", got)
	}
	if _, err := node.Budgets().ReleasePermit(context.Background(), first.ID, ""); err != nil {
		t.Fatal(err)
	}
	if got := permitsLive(t, reg); got["jobs"] != 2 {
		t.Fatalf("rlnode_permits_live after a release: %v", got)
	}
}

// permitsLive gathers rlnode_permits_live by policy.
func permitsLive(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "rlnode_permits_live" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "policy" {
					out[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}
