package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

const (
	globalLimit    = 400
	globalWindow   = "10s"
	globalWindowMs = 10_000
	regionDelay    = 50 * time.Millisecond // each way, region to parent
)

// TestGlobalBudgetAcrossTwoRegions: a parent and two regions (one node
// each) behind 50 ms-each-way proxies, a global policy of 400 per 10 s
// hammered from both regions: no global window allows more than 400;
// full windows admit at least 360, each region at least 80, and
// regional answers take well under a parent round trip; cut one region
// off: it answers only 200, 429 or 503 (503 once its slices ended), the
// total still holds, the other region gets at least 320 of a later
// window; after the heal it allows again within 10 s.
func TestGlobalBudgetAcrossTwoRegions(t *testing.T) {
	proctest.Long(t)
	m := startMultiRegion(t, regionDelay, map[string][]string{"eu": nil, "us": nil})
	m.globalPolicy(t, "g", globalLimit, globalWindow)

	// A region refuses to write a global policy: the parent owns it.
	r, err := m.regions["eu"].Do("PUT", "/v1/policies/g2", "", map[string]any{"algorithm": "fixed_window",
		"limits": []map[string]any{{"limit": 5, "window": "1s"}}, "consistency": "leased", "scope": "global"})
	if err != nil || r.Status != 409 || r.JSON["code"] != "global_policy" {
		t.Fatalf("a region wrote a global policy: %v %d %s", err, r.Status, r.Raw)
	}

	var log hitLog
	var wg sync.WaitGroup
	ctx, stop := context.WithCancel(context.Background())
	defer func() { stop(); wg.Wait() }()
	start := time.Now()
	for name, n := range m.regions {
		hammer(ctx, &wg, &log, n.URL(), name, "g", "tenant", 3, 10*time.Millisecond)
	}

	time.Sleep(22 * time.Second)
	both := time.Now()
	m.proxies["us"].Cut()
	cutAt := time.Now()
	time.Sleep(22 * time.Second) // a whole window after the one the cut fell in
	cutEnd := time.Now()
	m.proxies["us"].Heal()
	healAt := time.Now()
	var allowedAgain time.Duration
	proctest.Poll(t, 10*time.Second, func() error {
		for _, h := range log.all() {
			if h.region == "us" && h.allowed && h.sent.After(healAt) {
				allowedAgain = h.recv.Sub(healAt)
				return nil
			}
		}
		return context.DeadlineExceeded
	})
	time.Sleep(2 * time.Second)
	stop()
	wg.Wait()
	hits := log.all()

	if bad := globalViolations(hits, globalLimit, globalWindowMs); len(bad) > 0 {
		t.Fatalf("global limit exceeded (%d violations), first: %v", len(bad), bad[:min(len(bad), 5)])
	}
	// The cut region answers only 200, 429 or 503, and 503 once its
	// slices have ended (they last at most until the window's end).
	var lastCut200 time.Time
	var cut503 int
	for _, h := range hits {
		if h.region != "us" || h.sent.Before(cutAt) || !h.sent.Before(cutEnd) {
			continue
		}
		switch h.status {
		case 200:
			lastCut200 = h.recv
		case 429:
		case 503:
			cut503++
			if h.code != "parent_unreachable" {
				t.Errorf("cut region's 503 has code %q, want parent_unreachable", h.code)
			}
		default:
			t.Errorf("cut region answered %d (%s)", h.status, h.code)
		}
		if d := h.recv.Sub(h.sent); d > 5*time.Second {
			t.Errorf("cut region took %s to answer", d)
		}
	}
	if cut503 == 0 || lastCut200.After(cutAt.Add(11*time.Second)) {
		t.Errorf("cut region: %d answers 503, last 200 at %s after the cut: want 503 once its slices ended (within a window)", cut503, lastCut200.Sub(cutAt))
	}

	// The bar: full windows admit at least 90% of the limit and
	// each region at least a fifth of it; with one region cut off, the
	// other gets at least 80% of a later window. A window with nothing
	// allowed is missing from the map, so the count of windows is checked
	// too (10 s windows: two whole ones in each 22 s phase, at least one).
	full := windowAdmission(hits, globalWindowMs, start, both)
	for w, by := range full {
		t.Logf("both regions, window ending %d: admitted %d (eu %d, us %d) of %d", w, by["eu"]+by["us"], by["eu"], by["us"], globalLimit)
		if total := by["eu"] + by["us"]; total < globalLimit*9/10 || by["eu"] < globalLimit/5 || by["us"] < globalLimit/5 {
			t.Errorf("window ending %d admitted %d of %d (eu %d, us %d): want at least %d, and %d for each region",
				w, total, globalLimit, by["eu"], by["us"], globalLimit*9/10, globalLimit/5)
		}
	}
	cut := windowAdmission(hits, globalWindowMs, cutAt, cutEnd)
	for w, by := range cut {
		t.Logf("us cut off, window ending %d: eu admitted %d of %d (us %d)", w, by["eu"], globalLimit, by["us"])
		if by["eu"] < globalLimit*8/10 {
			t.Errorf("with us cut off, eu got only %d of window ending %d: want at least %d", by["eu"], w, globalLimit*8/10)
		}
	}
	if len(full) == 0 || len(cut) == 0 {
		t.Errorf("%d whole windows admitted anything with both regions up, %d with us cut off: want at least one each", len(full), len(cut))
	}
	// Regional answers do not wait on the parent.
	for _, r := range []string{"eu", "us"} {
		if d := medianLatency(hits, r); d <= 0 || d > regionDelay {
			t.Errorf("median answer in %s %s: want well under the parent round trip %s", r, d, 2*regionDelay)
		}
	}
	// A strict hit in one cluster, for comparison: the parent's own
	// default policy, one caller.
	var strict []regionHit
	for i := range 200 {
		strict = append(strict, hitOnce(m.parent.URL(), "parent", "default", fmt.Sprint("c", i)))
	}
	// Decided again (200, or 429 while eu has taken the window) after
	// the heal; allowed again needs a window with room.
	decidedAgain := time.Duration(-1)
	for _, h := range hits {
		if h.region == "us" && h.sent.After(healAt) && (h.status == 200 || h.status == 429) {
			if d := h.recv.Sub(healAt); decidedAgain < 0 || d < decidedAgain {
				decidedAgain = d
			}
		}
	}
	t.Logf("median answer: eu %s, us %s (parent round trip %s), a strict hit at the parent %s; cut region's 503s: %d; after the heal: decided again in %s, allowed again in %s",
		medianLatency(hits, "eu"), medianLatency(hits, "us"), 2*regionDelay, medianLatency(strict, "parent"), cut503, decidedAgain, allowedAgain)
}

// TestGlobalCheckCatchesARegionIgnoringSliceDeadlines runs the same
// demand against a correct region and a broken stand-in that spends its
// slices past their deadline (--debug-region-ignore-slice-deadline):
// region "a" takes a burst right after each global window ends and
// trickles otherwise, so it holds unspent units when a window ends;
// region "b" hammers. The check must pass on the first and fail on the
// second (region a's node leases off, see below): the broken region
// spends a window's units after it ended, on
// top of the next window's 400 (both parts of the check see it: hits
// sent after the window they name ended, and a window whose certainly
// decided hits number more than 400).
func TestGlobalCheckCatchesARegionIgnoringSliceDeadlines(t *testing.T) {
	proctest.Long(t)
	for _, tc := range []struct {
		name   string
		broken bool
	}{{"correct", false}, {"broken", true}} {
		t.Run(tc.name, func(t *testing.T) {
			// Region a's hits all go through its log (no key is ever hot
			// enough for a node lease): the slices themselves hold its
			// unspent units when a window ends. A node lease would take
			// them out in a burst and lose what its own lease outlived.
			extra := []string{"--lease-hot-hits", "1073741824"}
			if tc.broken {
				extra = append(extra, "--debug-region-ignore-slice-deadline")
			}
			m := startMultiRegion(t, regionDelay, map[string][]string{"a": extra, "b": nil})
			m.globalPolicy(t, "g", globalLimit, globalWindow)
			var log hitLog
			var wg sync.WaitGroup
			ctx, stop := context.WithTimeout(context.Background(), 25*time.Second)
			defer func() { stop(); wg.Wait() }()
			hammer(ctx, &wg, &log, m.regions["b"].URL(), "b", "g", "tenant", 3, 10*time.Millisecond)
			wg.Add(1)
			go func() {
				defer wg.Done()
				burstAndTrickle(ctx, &log, m.regions["a"].URL(), "a", "g", "tenant")
			}()
			wg.Wait()
			bad := globalViolations(log.all(), globalLimit, globalWindowMs)
			switch {
			case tc.broken && len(bad) == 0:
				t.Fatal("the check found nothing wrong with a region that ignores its slices' deadlines")
			case tc.broken:
				var counts []string
				for _, v := range bad {
					if strings.HasPrefix(v, "window") {
						counts = append(counts, v)
					}
				}
				t.Logf("the check caught the broken region: %d violations; window totals over the limit: %v; first: %v", len(bad), counts, bad[0])
			case len(bad) > 0:
				t.Fatalf("global limit exceeded (%d violations), first: %v", len(bad), bad[:min(len(bad), 5)])
			}
		})
	}
}

// burstAndTrickle sends 60 checks at once half a second after each
// global window it saw ends (by then the next window has opened at the
// parent: the other region's demand opens it within a round trip), and
// at the start, and one every 400 ms otherwise.
func burstAndTrickle(ctx context.Context, log *hitLog, url, region, policyName, key string) {
	var resetAt, burstAfter int64
	burst := func() {
		for range 60 {
			h := hitOnce(url, region, policyName, key)
			log.add(h)
			if h.allowed {
				resetAt = max(resetAt, h.resetAt)
			}
		}
	}
	burst()
	for ctx.Err() == nil {
		if resetAt != 0 && resetAt != burstAfter && time.Now().After(time.UnixMilli(resetAt).Add(500*time.Millisecond)) {
			burstAfter = resetAt
			burst()
			continue
		}
		h := hitOnce(url, region, policyName, key)
		log.add(h)
		if h.allowed {
			resetAt = max(resetAt, h.resetAt)
		}
		select {
		case <-ctx.Done():
		case <-time.After(400 * time.Millisecond):
		}
	}
}

// TestGlobalBudgetSurvivesARegionalFailover: region eu has three nodes;
// its leader, the region's holder, is killed while it holds slices, and
// later (the node back) the next leader is paused (SIGSTOP) for 6 s and
// resumed. A new leader never spends the slices of an earlier term
// (their deadlines were on another leader's clock), asks for its own,
// and eu decides again; no global window allows more than 400
// throughout.
func TestGlobalBudgetSurvivesARegionalFailover(t *testing.T) {
	proctest.Long(t)
	m := startRegions(t, regionDelay, map[string]regionSpec{"eu": {nodes: 3}, "us": {nodes: 1}})
	m.globalPolicy(t, "g", globalLimit, globalWindow)
	var log hitLog
	var wg sync.WaitGroup
	ctx, stop := context.WithCancel(context.Background())
	defer func() { stop(); wg.Wait() }()
	for _, n := range m.nodes["eu"] {
		hammer(ctx, &wg, &log, n.URL(), "eu", "g", "tenant", 1, 10*time.Millisecond)
	}
	hammer(ctx, &wg, &log, m.regions["us"].URL(), "us", "g", "tenant", 2, 10*time.Millisecond)
	time.Sleep(12 * time.Second)

	killed := leaderOf(t, m.nodes["eu"])
	killedAt := time.Now()
	killed.Kill()
	time.Sleep(10 * time.Second)
	killed.Restart()
	proctest.WaitReady(t, killed, 15*time.Second)

	paused := leaderOf(t, m.nodes["eu"])
	pausedAt := time.Now()
	if err := syscall.Kill(paused.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(6 * time.Second)
	if err := syscall.Kill(paused.Pid(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Second)
	stop()
	wg.Wait()
	hits := log.all()
	if bad := globalViolations(hits, globalLimit, globalWindowMs); len(bad) > 0 {
		t.Fatalf("global limit exceeded (%d violations), first: %v", len(bad), bad[:min(len(bad), 5)])
	}
	decidedAfter := func(at time.Time) time.Duration {
		first := time.Duration(-1)
		for _, h := range hits {
			if d := h.recv.Sub(at); h.region == "eu" && h.sent.After(at) && (h.status == 200 || h.status == 429) && (first < 0 || d < first) {
				first = d
			}
		}
		return first
	}
	afterKill, afterPause := decidedAfter(killedAt), decidedAfter(pausedAt)
	if afterKill < 0 || afterPause < 0 {
		t.Fatalf("eu decided nothing after its leader was killed (%s) or paused (%s)", afterKill, afterPause)
	}
	var windows []string
	for w, by := range windowAdmission(hits, globalWindowMs, killedAt, time.Now()) {
		windows = append(windows, fmt.Sprintf("window ending %d: eu %d, us %d", w, by["eu"], by["us"]))
	}
	t.Logf("eu decided again %s after its leader was killed, %s after the next was paused; whole windows since: %v",
		afterKill, afterPause, windows)
}

// TestRegionReachesAnHTTPSParent: a parent under mutual TLS; the region
// reaches it with its own node certificate (one CA for both clusters),
// mirrors its global policy and decides hits from slices.
func TestRegionReachesAnHTTPSParent(t *testing.T) {
	proctest.Long(t)
	dir := t.TempDir()
	proctest.TLSInit(t, rlnodeBin, dir, "parent", "region-eu")
	parent := proctest.StartNode(t, rlnodeBin, "parent", proctest.TLSFlags(dir, "parent")...)
	parent.TLS = proctest.ClientTLS(t, dir, true)
	proctest.WaitReady(t, parent, 15*time.Second)
	eu := proctest.StartNode(t, rlnodeBin, "region-eu", append(proctest.TLSFlags(dir, "region-eu"),
		"--region", "eu", "--parent", "https://"+parent.HTTPAddr)...)
	eu.TLS = proctest.ClientTLS(t, dir, true)
	proctest.WaitReady(t, eu, 15*time.Second)
	m := &multiRegion{parent: parent, regions: map[string]*proctest.Node{"eu": eu}}
	m.globalPolicy(t, "g", 5, "1m")
	for i := range 6 {
		r, err := eu.Do("GET", "/check/g/tenant", "", nil)
		want := 200
		if i == 5 {
			want = 429
		}
		if err != nil || r.Status != want {
			t.Fatalf("hit %d of 5 per minute in the region: %v %d %s; want %d", i+1, err, r.Status, r.Raw, want)
		}
	}
}
