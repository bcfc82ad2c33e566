package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlnode/rlnode/gubapi/gubpb"
)

// TestGubernatorFollowerLoad measures GetRateLimits calls per second
// through a follower of a three-node cluster: 32 callers, single-item
// strict calls on their own keys, 5 s a round. It runs only when asked,
// with the binaries to compare interleaved A/B (a noisy machine's drift
// hits both alike), e.g.
//
//	RLNODE_GUB_LOAD='before=/tmp/a,after=/tmp/b' RLNODE_GUB_LOAD_ROUNDS=3 \
//	  go test ./cmd/rlnode -run TestGubernatorFollowerLoad -v -count=1
//
// It reports each round and the medians; it asserts nothing about speed.
func TestGubernatorFollowerLoad(t *testing.T) {
	spec := os.Getenv("RLNODE_GUB_LOAD")
	if spec == "" {
		t.Skip("set RLNODE_GUB_LOAD=name=binary,... to measure")
	}
	rounds := 3
	fmt.Sscan(os.Getenv("RLNODE_GUB_LOAD_ROUNDS"), &rounds)
	type bin struct{ name, path string }
	var bins []bin
	for _, p := range strings.Split(spec, ",") {
		name, path, ok := strings.Cut(p, "=")
		if !ok {
			t.Fatalf("RLNODE_GUB_LOAD: %q is not name=binary", p)
		}
		bins = append(bins, bin{name, path})
	}
	rates := map[string][]float64{}
	for r := range rounds {
		for _, b := range bins {
			t.Run(fmt.Sprintf("%s-%d", b.name, r), func(t *testing.T) {
				rate := followerLoad(t, b.path)
				rates[b.name] = append(rates[b.name], rate)
				t.Logf("%s round %d: %.0f calls/s through a follower", b.name, r, rate)
			})
		}
	}
	for _, b := range bins {
		rs := slices.Clone(rates[b.name])
		slices.Sort(rs)
		if len(rs) > 0 {
			t.Logf("%s: median %.0f calls/s of %v", b.name, rs[len(rs)/2], rates[b.name])
		}
	}
}

func followerLoad(t *testing.T, bin string) float64 {
	nodes, clients := gubNodesOf(t, bin, gubToken, 3)
	c := clients[nodes[1].ID] // n1 bootstrapped and leads; n2 follows
	var done atomic.Int64
	stop := time.Now().Add(5 * time.Second)
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stop); i++ {
				ctx, cancel := gubCtx()
				_, err := c.GetRateLimits(ctx, &gubpb.GetRateLimitsReq{Requests: []*gubpb.RateLimitReq{
					{Name: "load", UniqueKey: fmt.Sprintf("w%d-%d", w, i%50), Hits: 1, Limit: 1 << 30, Duration: 60_000}}})
				cancel()
				if err == nil {
					done.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return float64(done.Load()) / 5
}
