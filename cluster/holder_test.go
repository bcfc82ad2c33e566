package cluster_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/httpapi/apitest"
	"github.com/rlnode/rlnode/policy"
)

// TestHolderDecidesHotKeysLocallyWithinTheLimit: a hot key of a leased
// policy is decided from memory on every node, and the whole cluster
// allows no more than the limit in the window, for each algorithm.
func TestHolderDecidesHotKeysLocallyWithinTheLimit(t *testing.T) {
	c := apitest.Start(t, 3, clustertest.Options{Policies: []policy.Policy{
		leasedPolicy("lf", "fixed_window", 150, time.Hour),
		leasedPolicy("ls", "sliding_window", 150, time.Hour),
		leasedPolicy("lt", "token_bucket", 150, time.Hour),
		alignedToEpoch(leasedPolicy("le", "fixed_window", 150, 24*time.Hour)),
	}})
	ctx := context.Background()
	var allLocal int64
	defer func() { checkLeaseStats(t, c.Live(), allLocal) }()
	for _, pol := range []string{"lf", "ls", "lt", "le"} {
		day := time.Now().UTC().YearDay()
		var allowed, local, localAllowed atomic.Int64
		var wg sync.WaitGroup
		for _, n := range c.Live() {
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 200 {
						res, err := n.Check(ctx, pol, "hot", 1)
						if err != nil {
							continue // not counted or unknown: never an allow
						}
						if res.Allowed {
							allowed.Add(1)
						}
						if res.Decided == cluster.DecidedLocal {
							local.Add(1)
							if res.Allowed {
								localAllowed.Add(1)
							}
						}
					}
				}()
			}
		}
		wg.Wait()
		t.Logf("%s: %d allowed of 150 (1200 asked), %d decided locally", pol, allowed.Load(), local.Load())
		if allowed.Load() > 150 && !(pol == "le" && time.Now().UTC().YearDay() != day) {
			t.Fatalf("%s: %d allowed, over the limit of 150", pol, allowed.Load())
		}
		if local.Load() == 0 || localAllowed.Load() == 0 {
			t.Fatalf("%s: %d checks decided locally, %d of them allowed; want some of each (granted units spent locally)", pol, local.Load(), localAllowed.Load())
		}
		allLocal += local.Load()
	}
}

// checkLeaseStats: the members' lease totals (the status page's and rlnode
// top's LOCAL) count every hit decided from a lease, allowed or refused,
// and some grants.
func checkLeaseStats(t *testing.T, nodes []*clustertest.Node, local int64) {
	t.Helper()
	if t.Failed() {
		return
	}
	var decided, grants uint64
	for _, n := range nodes {
		l := n.Views().LocalMemberStatus().Leases
		decided, grants = decided+l.DecidedLocal, grants+l.Grants
	}
	if decided != uint64(local) || grants == 0 {
		t.Fatalf("members' lease totals: %d decided locally (want %d, the checks decided from leases), %d grants (want some)", decided, local, grants)
	}
}

// alignedToEpoch makes a fixed-window policy's windows whole multiples of
// its length since the epoch (a day policy's end at 00:00 UTC).
func alignedToEpoch(p policy.Policy) policy.Policy { p.Align = policy.AlignEpoch; return p }

// TestHolderReturnsUnusedUnitsWhenKeyCools: a node that stops seeing a key
// gives back what it holds, so a strict-path hit elsewhere gets it.
func TestHolderReturnsUnusedUnitsWhenKeyCools(t *testing.T) {
	c := apitest.Start(t, 3, clustertest.Options{Policies: []policy.Policy{leasedPolicy("lf", "fixed_window", 1000, time.Hour)}})
	leader := c.Leader(5 * time.Second)
	f := c.Followers(leader)[0]
	ctx := context.Background()
	for range 40 { // hot on the follower: it takes a grant
		if _, err := f.Check(ctx, "lf", "k", 1); err != nil {
			t.Fatal(err)
		}
	}
	clustertest.Poll(t, 10*time.Second, func() error {
		p, err := leader.Peek(ctx, "lf", "k", false)
		if err != nil {
			return err
		}
		if p.Used != 40 {
			return errorf("used %d of 1000 on the leader, want 40 once the follower gave back what it did not spend", p.Used)
		}
		return nil
	})
}

// TestHolderDecidesGroupsLocallyOnlyWhenEveryPartCan: an all-or-nothing
// check of hot leased keys is decided from leases; one with a strict key
// in it goes through the log.
func TestHolderDecidesGroupsLocallyOnlyWhenEveryPartCan(t *testing.T) {
	c := apitest.Start(t, 3, clustertest.Options{Policies: []policy.Policy{leasedPolicy("lf", "fixed_window", 100000, time.Hour)}})
	f := c.Followers(c.Leader(5 * time.Second))[0]
	ctx := context.Background()
	pair := []cluster.Hit{{Policy: "lf", Client: "a", Cost: 1}, {Policy: "lf", Client: "b", Cost: 1}}
	clustertest.Poll(t, 10*time.Second, func() error {
		res, err := f.CheckAll(ctx, pair)
		if err != nil || !res.Allowed || res.Decided != cluster.DecidedLocal {
			return errorf("group of hot leased keys: %+v %v", res.Decided, err)
		}
		return nil
	})
	mixed := append(pair, cluster.Hit{Policy: "default", Client: "a", Cost: 1})
	if res, err := f.CheckAll(ctx, mixed); err != nil || !res.Allowed || res.Decided != cluster.DecidedLog {
		t.Fatalf("group with a strict key: %+v %v; want allowed through the log", res, err)
	}
}
