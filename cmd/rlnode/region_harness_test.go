package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// The multi-region harness: a parent and regions as real processes, the
// region-to-parent paths through delay proxies, callers whose every
// answer is recorded with the test's clock (one machine: the parent's
// window times and the test's clock are the same clock), and the check
// that no global window allows more than its limit.

// regionHit is one recorded answer.
type regionHit struct {
	region     string
	sent, recv time.Time
	status     int
	allowed    bool
	resetAt    int64 // the global window the answer names (Unix ms)
	code       string
	// decided is "local" for a hit decided from a lease (a node's or an
	// application's), else "log" (or empty: no decision).
	decided string
}

type hitLog struct {
	mu   sync.Mutex
	hits []regionHit
}

func (l *hitLog) add(h regionHit) {
	l.mu.Lock()
	l.hits = append(l.hits, h)
	l.mu.Unlock()
}

func (l *hitLog) all() []regionHit {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.hits)
}

var hitClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

// hitOnce sends one check of key under policy to a region's node.
func hitOnce(url, region, policyName, key string) regionHit {
	h := regionHit{region: region, sent: time.Now()}
	resp, err := hitClient.Get(url + "/check/" + policyName + "/" + key)
	h.recv = time.Now()
	if err != nil {
		h.code = err.Error()
		return h
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	h.status = resp.StatusCode
	var a struct {
		Allowed bool   `json:"allowed"`
		ResetAt int64  `json:"resetAt"`
		Code    string `json:"code"`
		Decided string `json:"decided"`
	}
	_ = json.Unmarshal(body, &a)
	h.allowed, h.resetAt, h.code, h.decided = a.Allowed && resp.StatusCode == 200, a.ResetAt, a.Code, a.Decided
	return h
}

// hammer sends checks from workers callers, each pausing pace between
// its checks, until ctx ends.
func hammer(ctx context.Context, wg *sync.WaitGroup, log *hitLog, url, region, policyName, key string, workers int, pace time.Duration) {
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				log.add(hitOnce(url, region, policyName, key))
				select {
				case <-ctx.Done():
				case <-time.After(pace):
				}
			}
		}()
	}
}

// clockSlack is how far the parent's stamps may be from the test's clock
// on one machine (whole-ms stamps, one wall sample per term); the check
// gives it to the system under test.
const clockSlack = 5 * time.Millisecond

// globalViolations checks allowed hits of one global key across
// regions against a limit per window of windowMs:
//
//   - an allowed hit names the window it was spent in (resetAt), and was
//     sent before that window ended: a hit sent after is spent in a
//     later window on top of that window's own limit;
//   - per window [resetAt-windowMs, resetAt), the allowed hits that were
//     certainly decided within it (sent after its start, answered
//     before its end), whatever window they name, are at most limit;
//   - per window, the allowed hits that name it are at most limit.
func globalViolations(hits []regionHit, limit int64, windowMs int64) []string {
	var bad []string
	named := map[int64]int64{}
	for _, h := range hits {
		if !h.allowed {
			continue
		}
		named[h.resetAt]++
		if end := time.UnixMilli(h.resetAt); !h.sent.Before(end.Add(clockSlack)) {
			bad = append(bad, fmt.Sprintf("%s: allowed hit sent %s after the end of the window it names (%d)",
				h.region, h.sent.Sub(end), h.resetAt))
		}
	}
	for resetAt, n := range named {
		if n > limit {
			bad = append(bad, fmt.Sprintf("window ending %d: %d allowed hits name it, limit %d", resetAt, n, limit))
		}
		start, end := time.UnixMilli(resetAt-windowMs).Add(clockSlack), time.UnixMilli(resetAt).Add(-clockSlack)
		inside := int64(0)
		for _, h := range hits {
			if h.allowed && !h.sent.Before(start) && h.recv.Before(end) {
				inside++
			}
		}
		if inside > limit {
			bad = append(bad, fmt.Sprintf("window ending %d: %d allowed hits certainly decided within it, limit %d", resetAt, inside, limit))
		}
	}
	sort.Strings(bad)
	return bad
}

// windowAdmission is, per window entirely within [from, to], the allowed
// hits naming it per region.
func windowAdmission(hits []regionHit, windowMs int64, from, to time.Time) map[int64]map[string]int64 {
	out := map[int64]map[string]int64{}
	for _, h := range hits {
		if !h.allowed {
			continue
		}
		start, end := time.UnixMilli(h.resetAt-windowMs), time.UnixMilli(h.resetAt)
		if start.Before(from) || end.After(to) {
			continue
		}
		if out[h.resetAt] == nil {
			out[h.resetAt] = map[string]int64{}
		}
		out[h.resetAt][h.region]++
	}
	return out
}

// medianLatency is the median answer time of a region's decided hits
// (200 and 429).
func medianLatency(hits []regionHit, region string) time.Duration {
	var ds []time.Duration
	for _, h := range hits {
		if h.region == region && (h.status == 200 || h.status == 429) {
			ds = append(ds, h.recv.Sub(h.sent))
		}
	}
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// multiRegion is a parent and regions, each region reaching the parent
// through its own delay proxy (every node of a region through the same
// one).
type multiRegion struct {
	parent  *proctest.Node
	regions map[string]*proctest.Node // a region's first node
	nodes   map[string][]*proctest.Node
	proxies map[string]*proctest.DelayProxy
}

// startMultiRegion starts a one-node parent and one-node regions with
// the extra flags given per region.
func startMultiRegion(t *testing.T, delay time.Duration, regions map[string][]string) *multiRegion {
	t.Helper()
	sized := map[string]regionSpec{}
	for name, extra := range regions {
		sized[name] = regionSpec{nodes: 1, extra: extra}
	}
	return startRegions(t, delay, sized)
}

type regionSpec struct {
	nodes int
	extra []string
}

func startRegions(t *testing.T, delay time.Duration, regions map[string]regionSpec) *multiRegion {
	t.Helper()
	m := &multiRegion{regions: map[string]*proctest.Node{}, nodes: map[string][]*proctest.Node{}, proxies: map[string]*proctest.DelayProxy{}}
	m.parent = proctest.StartNode(t, rlnodeBin, "parent")
	proctest.WaitReady(t, m.parent, 15*time.Second)
	for name, spec := range regions {
		m.proxies[name] = proctest.StartDelayProxy(t, m.parent.HTTPAddr, delay)
		args := append([]string{"--region", name, "--parent", m.proxies[name].Addr}, spec.extra...)
		if spec.nodes > 1 {
			m.nodes[name] = proctest.StartCluster(t, rlnodeBin, spec.nodes, args...)
		} else {
			m.nodes[name] = []*proctest.Node{proctest.StartNode(t, rlnodeBin, "region-"+name, args...)}
		}
		m.regions[name] = m.nodes[name][0]
	}
	for _, ns := range m.nodes {
		for _, n := range ns {
			proctest.WaitReady(t, n, 15*time.Second)
		}
	}
	return m
}

// globalPolicy defines a global policy at the parent and waits until
// every region mirrors it.
func (m *multiRegion) globalPolicy(t *testing.T, name string, limit int64, window string) {
	t.Helper()
	r, err := m.parent.Do("PUT", "/v1/policies/"+name, "", map[string]any{"algorithm": "fixed_window",
		"limits": []map[string]any{{"limit": limit, "window": window}}, "consistency": "leased", "scope": "global"})
	if err != nil || r.Status != 200 {
		t.Fatalf("define global policy at the parent: %v %d %s", err, r.Status, r.Raw)
	}
	for region, n := range m.regions {
		proctest.Poll(t, 15*time.Second, func() error {
			r, err := n.Do("GET", "/v1/policies/"+name, "", nil)
			if err != nil || r.Status != 200 || r.JSON["mirrored"] != true || r.JSON["scope"] != "global" {
				return fmt.Errorf("region %s does not mirror %s yet: %v %s", region, name, err, r.Raw)
			}
			return nil
		})
	}
}
