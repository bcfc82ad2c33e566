package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/client"
	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// TestRegionSubleasesStayWithinTheGlobalLimit: in a region of three
// nodes, node leases (every node, followers too) and a client.Local
// application decide hits of a global key locally, from sub-leases of
// the region's slices; a second region hammers the same key; the
// parent is behind 50 ms-each-way proxies. No global window allows more
// than its limit across regions and holders, and local decisions
// actually happen (the answers say so, and the nodes' metrics count
// them).
func TestRegionSubleasesStayWithinTheGlobalLimit(t *testing.T) {
	proctest.Long(t)
	m := startRegions(t, regionDelay, map[string]regionSpec{"eu": {nodes: 3}, "us": {nodes: 1}})
	m.globalPolicy(t, "g", globalLimit, globalWindow)

	var log hitLog
	var wg sync.WaitGroup
	ctx, stop := context.WithCancel(context.Background())
	defer func() { stop(); wg.Wait() }()
	var addrs []string
	for _, n := range m.nodes["eu"] {
		addrs = append(addrs, n.HTTPAddr)
		hammer(ctx, &wg, &log, n.URL(), "eu", "g", "tenant", 2, 10*time.Millisecond)
	}
	hammer(ctx, &wg, &log, m.regions["us"].URL(), "us", "g", "tenant", 2, 10*time.Millisecond)
	c, err := client.New(client.Config{Addrs: addrs, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	app, err := client.NewLocal(c, client.LocalConfig{Holder: "app-eu"})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close(context.Background())
	appErrs := map[string]int{}
	var errMu sync.Mutex
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				h := regionHit{region: "eu", sent: time.Now()}
				r, err := app.Allow(ctx, "g", "tenant")
				h.recv = time.Now()
				switch {
				case err != nil && ctx.Err() == nil:
					errMu.Lock()
					appErrs[appErrKind(err)]++
					errMu.Unlock()
				case err == nil:
					h.status, h.allowed, h.resetAt, h.decided = 429, r.Allowed, r.ResetAt.UnixMilli(), "log"
					if r.Allowed {
						h.status = 200
					}
					if strings.HasPrefix(r.ServedBy, "local:") {
						h.decided = "app"
					}
				}
				log.add(h)
				select {
				case <-ctx.Done():
				case <-time.After(10 * time.Millisecond):
				}
			}
		}()
	}
	start := time.Now()
	time.Sleep(32 * time.Second)
	stop()
	wg.Wait()
	hits := log.all()

	if bad := globalViolations(hits, globalLimit, globalWindowMs); len(bad) > 0 {
		t.Fatalf("global limit exceeded (%d violations), first: %v", len(bad), bad[:min(len(bad), 5)])
	}
	counts := map[string]int{} // allowed hits by how they were decided
	for _, h := range hits {
		if h.allowed {
			counts[h.region+"/"+h.decided]++
		}
	}
	var nodeLocal []int64
	for _, n := range m.nodes["eu"] {
		nodeLocal = append(nodeLocal, leaseMetric(t, n.URL(), `rlnode_lease_local_decisions_total{policy="g"}`))
	}
	var windows []string
	for w, by := range windowAdmission(hits, globalWindowMs, start, time.Now()) {
		windows = append(windows, fmt.Sprintf("window ending %d: eu %d, us %d", w, by["eu"], by["us"]))
	}
	t.Logf("allowed by how decided: %v; eu nodes' local decisions of g: %v; application errors: %v; whole windows: %v",
		counts, nodeLocal, appErrs, windows)
	if counts["eu/local"] == 0 || counts["eu/app"] == 0 {
		t.Errorf("no allowed hit decided from a node lease (%d) or by the application's sub-lease (%d) in eu",
			counts["eu/local"], counts["eu/app"])
	}
	followersLocal := int64(0)
	leader := leaderOf(t, m.nodes["eu"])
	for i, n := range m.nodes["eu"] {
		if n != leader {
			followersLocal += nodeLocal[i]
		}
	}
	if followersLocal == 0 {
		t.Errorf("eu's followers decided no hit of g from a node lease: %v", nodeLocal)
	}
}

// appErrKind names an application's error for the report.
func appErrKind(err error) string {
	var ce *client.Error
	if errors.As(err, &ce) {
		return ce.Code
	}
	return "other"
}
