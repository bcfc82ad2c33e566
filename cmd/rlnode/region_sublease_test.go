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
	"github.com/rlnode/rlnode/rlqs/rlqstest"
)

// TestRegionSubleasesStayWithinTheGlobalLimit: in a region of three
// nodes, node leases (every node, followers too) and a client.Local
// application decide hits of global keys locally, from sub-leases of
// the region's slices; a second region takes from the same keys; the
// parent is behind 50 ms-each-way proxies. Two global policies at once:
// g (400 per 10 s) hammered far past its limit, and gt (1000 per 10 s)
// at about 60% of it, so holders hold unspent units whenever a window
// ends (a sub-lease that outlived its slice would spend them after the
// window they belong to). No global window of either allows more than
// its limit across regions and holders, no allowed hit is spent after
// its window, and local decisions actually happen (the answers say so,
// and the followers' metrics count them).
func TestRegionSubleasesStayWithinTheGlobalLimit(t *testing.T) {
	proctest.Long(t)
	m := startRegions(t, regionDelay, map[string]regionSpec{"eu": {nodes: 3}, "us": {nodes: 1}})
	m.globalPolicy(t, "g", globalLimit, globalWindow)
	m.globalPolicy(t, "gt", 1000, globalWindow)

	var hammered, trickled hitLog
	var wg sync.WaitGroup
	ctx, stop := context.WithCancel(context.Background())
	defer func() { stop(); wg.Wait() }()
	var addrs []string
	for _, n := range m.nodes["eu"] {
		addrs = append(addrs, n.HTTPAddr)
		hammer(ctx, &wg, &hammered, n.URL(), "eu", "g", "tenant", 2, 10*time.Millisecond)
		hammer(ctx, &wg, &trickled, n.URL(), "eu", "gt", "tenant", 1, 70*time.Millisecond)
	}
	hammer(ctx, &wg, &hammered, m.regions["us"].URL(), "us", "g", "tenant", 2, 10*time.Millisecond)
	hammer(ctx, &wg, &trickled, m.regions["us"].URL(), "us", "gt", "tenant", 1, 70*time.Millisecond)
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
	var errs appErrors
	appHammer(ctx, &wg, &hammered, &errs, app, "g", 2, 10*time.Millisecond)
	appHammer(ctx, &wg, &trickled, &errs, app, "gt", 1, 70*time.Millisecond)
	start := time.Now()
	time.Sleep(32 * time.Second)
	stop()
	wg.Wait()

	counts := map[string]int{} // allowed hits by policy, region and how they were decided
	for name, log := range map[string]*hitLog{"g": &hammered, "gt": &trickled} {
		limit := int64(globalLimit)
		if name == "gt" {
			limit = 1000
		}
		hits := log.all()
		if bad := globalViolations(hits, limit, globalWindowMs); len(bad) > 0 {
			t.Errorf("%s: global limit exceeded (%d violations), first: %v", name, len(bad), bad[:min(len(bad), 5)])
		}
		for _, h := range hits {
			if h.allowed {
				counts[name+"/"+h.region+"/"+h.decided]++
			}
		}
		var windows []string
		for w, by := range windowAdmission(hits, globalWindowMs, start, time.Now()) {
			windows = append(windows, fmt.Sprintf("ending %d: eu %d, us %d", w, by["eu"], by["us"]))
		}
		t.Logf("%s (limit %d per 10 s), whole windows: %v", name, limit, windows)
	}
	leader := leaderOf(t, m.nodes["eu"])
	var nodeLocal []int64
	followersLocal := int64(0)
	for _, n := range m.nodes["eu"] {
		v := leaseMetric(t, n.URL(), `rlnode_lease_local_decisions_total{policy="g`)
		nodeLocal = append(nodeLocal, v)
		if n != leader {
			followersLocal += v
		}
	}
	t.Logf("allowed by policy/region/how decided: %v; eu nodes' local decisions of global keys: %v; application errors: %v (load: see uptime)",
		counts, nodeLocal, errs.snapshot())
	if counts["g/eu/local"]+counts["gt/eu/local"] == 0 || counts["g/eu/app"]+counts["gt/eu/app"] == 0 {
		t.Errorf("no allowed hit in eu decided from a node lease or by the application's sub-lease: %v", counts)
	}
	if followersLocal == 0 {
		t.Errorf("eu's followers decided no hit of a global key from a node lease: %v", nodeLocal)
	}
}

// appErrors counts an application's errors by problem code.
type appErrors struct {
	mu sync.Mutex
	by map[string]int
}

func (e *appErrors) add(err error) {
	kind := "other"
	var ce *client.Error
	if errors.As(err, &ce) {
		kind = ce.Code
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.by == nil {
		e.by = map[string]int{}
	}
	e.by[kind]++
}

func (e *appErrors) snapshot() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]int{}
	for k, v := range e.by {
		out[k] = v
	}
	return out
}

// appHammer decides hits of (policyName, "tenant") through an
// application's client.Local from workers callers, each pausing pace
// between its hits, until ctx ends; decided is "app" for a decision
// made from the application's own grant, "log" for one the cluster
// made.
func appHammer(ctx context.Context, wg *sync.WaitGroup, log *hitLog, errs *appErrors, app *client.Local, policyName string, workers int, pace time.Duration) {
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				h := regionHit{region: "eu", sent: time.Now()}
				r, err := app.Allow(ctx, policyName, "tenant")
				h.recv = time.Now()
				switch {
				case err != nil && ctx.Err() == nil:
					errs.add(err)
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
				case <-time.After(pace):
				}
			}
		}()
	}
}

// TestRLQSInARegionGetsSubleases: Envoys on a region's RLQS port get
// assignments of a global policy's bucket, sub-leases of the region's
// slices, that together never exceed the global limit (the parent
// behind a 50 ms-each-way proxy).
func TestRLQSInARegionGetsSubleases(t *testing.T) {
	proctest.Long(t)
	const limit = 50
	rlqsAddr := proctest.FreeAddr(t)
	m := startMultiRegion(t, regionDelay, map[string][]string{"eu": {"--rlqs-addr", rlqsAddr, "--rlqs-lease", "1s"}})
	m.globalPolicy(t, "edge", limit, "1h")

	bucket := map[string]string{"tenant": "acme"}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var envoys []*rlqstest.Envoy
	for range 2 {
		e, err := rlqstest.Start(rlqstest.Config{Addr: rlqsAddr, Domain: "edge", Interval: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		e.Allow(bucket)
		if err := e.WaitAssigned(ctx, bucket); err != nil {
			t.Fatalf("an Envoy in the region got no assignment of a global policy: %v", err)
		}
		envoys = append(envoys, e)
	}
	allowed := 0
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		for _, e := range envoys {
			if e.Allow(bucket) {
				allowed++
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("two Envoys in the region allowed %d of a global limit of %d", allowed, limit)
	if allowed > limit || allowed == 0 {
		t.Fatalf("%d allowed across two Envoys in the region, global limit %d", allowed, limit)
	}
}
