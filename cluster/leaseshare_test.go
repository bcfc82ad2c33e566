package cluster_test

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/policy"
)

// TestLeasedZipfLocalShare measures, per node, the share of a leased
// policy's hits decided from the node's own leases when keys are drawn
// by Zipf(1.07) from 10,000 (issue 40's realistic skew) and every node
// gets a third of the load, as a load balancer spreads it. A measurement,
// not a check (the machine's speed moves it); it runs only when asked:
//
//	RLNODE_BENCH_ZIPF=8s go test ./cluster -run TestLeasedZipfLocalShare -v
//
// RLNODE_BENCH_ZIPF_KEYS and RLNODE_BENCH_ZIPF_WORKERS (per node) change
// the key count (10000) and the concurrency (21 per node, 63 in all).
func TestLeasedZipfLocalShare(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("RLNODE_BENCH_ZIPF"))
	if err != nil {
		t.Skip("set RLNODE_BENCH_ZIPF to a duration (e.g. 8s) to measure the local share of leased Zipf hits per node")
	}
	keys := envInt("RLNODE_BENCH_ZIPF_KEYS", 10000)
	workers := envInt("RLNODE_BENCH_ZIPF_WORKERS", 21)
	c := clustertest.Start(t, 3, clustertest.Options{Policies: []policy.Policy{
		leasedPolicy("lzipf", "fixed_window", 1_000_000_000, time.Minute),
	}})
	leader := c.Leader(10 * time.Second)
	c.WaitConverged(10 * time.Second)
	nodes := append([]*clustertest.Node{leader}, c.Followers(leader)...)
	type tally struct{ local, log, errs atomic.Int64 }
	tallies := make([]tally, len(nodes))
	run := func(d time.Duration, count bool) {
		stop := time.Now().Add(d)
		var wg sync.WaitGroup
		for i, n := range nodes {
			for w := range workers {
				wg.Go(func() {
					z := rand.NewZipf(rand.New(rand.NewPCG(uint64(i), uint64(w))), 1.07, 1, uint64(keys-1))
					var res cluster.OneResult
					for time.Now().Before(stop) {
						vh, err := cluster.ValidateHit("lzipf", "k"+strconv.FormatUint(z.Uint64(), 10), 1)
						if err != nil {
							t.Error(err)
							return
						}
						err = n.Node.CheckOne(context.Background(), vh, 2*time.Second, &res)
						switch {
						case !count:
						case err != nil:
							tallies[i].errs.Add(1)
						case res.Decided == cluster.DecidedLocal:
							tallies[i].local.Add(1)
						default:
							tallies[i].log.Add(1)
						}
					}
				})
			}
		}
		wg.Wait()
	}
	run(2*time.Second, false) // warm up: leases for the hot keys
	run(d, true)
	var all, allLocal int64
	for i, n := range nodes {
		role := "follower"
		if i == 0 {
			role = "leader"
		}
		local, log := tallies[i].local.Load(), tallies[i].log.Load()
		all, allLocal = all+local+log, allLocal+local
		t.Logf("%s %s: %d hits, %.1f%% decided locally, %.0f hits/s, %d errors", role, n.ID, local+log,
			100*float64(local)/float64(max(1, local+log)), float64(local+log)/d.Seconds(), tallies[i].errs.Load())
	}
	t.Logf("all nodes: %.1f%% decided locally, %.0f hits/s (Zipf 1.07 on %d keys, %d workers per node, %s)",
		100*float64(allLocal)/float64(max(1, all)), float64(all)/d.Seconds(), keys, workers, d)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
