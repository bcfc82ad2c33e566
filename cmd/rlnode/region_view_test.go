package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
	"github.com/rlnode/rlnode/httpapi"
)

// regionViewOf asks a node for GET /v1/cluster/region with the token.
func regionViewOf(n *proctest.Node) (httpapi.RegionBody, error) {
	var b httpapi.RegionBody
	r, err := n.Do("GET", httpapi.RegionPath, polToken, nil)
	if err != nil || r.Status != 200 {
		return b, fmt.Errorf("GET %s on %s: %v %d %s", httpapi.RegionPath, n.ID, err, r.Status, r.Raw)
	}
	return b, json.Unmarshal(r.Raw, &b)
}

func regionKeyOf(b httpapi.RegionBody, policyName, client string) (httpapi.RegionKey, bool) {
	for _, k := range b.Keys {
		if k.Policy == policyName && k.Client == client {
			return k, true
		}
	}
	return httpapi.RegionKey{}, false
}

// TestRegionOperatorView: a parent and a three-node region (25 ms each
// way between them); hits of a global policy of 50 a minute spend the
// region's slices until the parent says the window is spent. GET
// /v1/cluster/region (admin-guarded) on the region's leader then shows
// the holder at the parent with its round trip and, for the key, the
// units the parent lent, the hits' spend (exactly the allowed hits) and
// the units refused for want of a slice; a follower shows the same
// counters from its own state machine and names the leader; the parent
// (in no region) answers 404; rlnode top --once prints the section.
func TestRegionOperatorView(t *testing.T) {
	proctest.Long(t)
	const delay = 25 * time.Millisecond
	// Every hit through the log (no node lease: --lease-hot-hits past
	// any rate), so the counters match the hits one for one; a node
	// lease's units count as spent when lent, its local refusals not as
	// short.
	m := startRegions(t, delay, map[string]regionSpec{"eu": {nodes: 3, extra: []string{"--cluster-token", polToken, "--lease-hot-hits", "1073741824"}}})
	m.globalPolicy(t, "g", 50, "1m")
	leader, follower := followerOf(t, m.nodes["eu"])

	allowed, refused := 0, 0
	for range 60 {
		h := hitOnce(leader.URL(), "eu", "g", "alice")
		switch {
		case h.allowed:
			allowed++
		case h.status == 429:
			refused++
		}
	}
	if allowed > 50 || refused == 0 {
		t.Fatalf("60 hits of a global 50/min: %d allowed, %d refused; want at most 50 allowed and some refused", allowed, refused)
	}

	if r, err := leader.Do("GET", httpapi.RegionPath, "", nil); err != nil || r.Status != 401 {
		t.Fatalf("GET %s without the token: %v %d %s; want 401", httpapi.RegionPath, err, r.Status, r.Raw)
	}
	if r, err := m.parent.Do("GET", httpapi.RegionPath, "", nil); err != nil || r.Status != 404 || r.JSON["code"] != "not_found" {
		t.Fatalf("GET %s on the parent (no region): %v %d %s; want 404 not_found", httpapi.RegionPath, err, r.Status, r.Raw)
	}

	var lv httpapi.RegionBody
	proctest.Poll(t, 5*time.Second, func() error {
		var err error
		if lv, err = regionViewOf(leader); err != nil {
			return err
		}
		// The leader's holder reads the counters every 20 ms.
		if k, ok := regionKeyOf(lv, "g", "alice"); !ok || k.Spent != int64(allowed) || k.Short < int64(refused) {
			return fmt.Errorf("leader's view %+v: want g/alice spent %d, short at least %d", lv, allowed, refused)
		}
		return nil
	})
	k, _ := regionKeyOf(lv, "g", "alice")
	p := lv.Parent
	switch {
	case lv.Region != "eu" || !lv.Holder || lv.Node != leader.ID || lv.LeaderID != leader.ID:
		t.Fatalf("leader's view names %q holder=%v node %q leader %q; want eu, the holder, %s", lv.Region, lv.Holder, lv.Node, lv.LeaderID, leader.ID)
	case p.Holder != "region:eu" || p.Addrs != m.proxies["eu"].Addr || !p.Up || p.Calls == 0:
		t.Fatalf("leader's parent view %+v: want holder region:eu at %s, up, with calls", p, m.proxies["eu"].Addr)
	case p.RTTMs < float64(2*delay/time.Millisecond):
		t.Fatalf("parent round trip %.1f ms through a proxy delaying %s each way", p.RTTMs, delay)
	case k.Got < k.Spent || k.Held > k.Got-k.Spent-k.Returned || k.Short < int64(refused):
		t.Fatalf("g/alice %+v after %d allowed and %d refused: want got >= spent, held <= got-spent-returned, short >= refused", k, allowed, refused)
	case lv.KeysTotal != 1:
		t.Fatalf("keysTotal %d; want 1", lv.KeysTotal)
	}

	proctest.Poll(t, 5*time.Second, func() error {
		fv, err := regionViewOf(follower)
		if err != nil {
			return err
		}
		fk, ok := regionKeyOf(fv, "g", "alice")
		if fv.Holder || fv.LeaderID != leader.ID || !ok || fk.Spent != k.Spent || fk.Got < k.Got {
			return fmt.Errorf("follower's view %+v: want not the holder, leader %s, g/alice spent %d", fv, leader.ID, k.Spent)
		}
		return nil
	})

	out := topCLI(t, leader, "--once")
	for _, want := range []string{"region eu, holder region:eu at parent " + m.proxies["eu"].Addr + ": up, round trip", "GLOBAL POLICY", "alice"} {
		if !strings.Contains(out, want) {
			t.Fatalf("rlnode top --once on the region's leader printed:\n%s\nwant %q", out, want)
		}
	}
	if out := topCLI(t, follower, "--once"); !strings.Contains(out, "held by the region's leader "+leader.ID) {
		t.Fatalf("rlnode top --once on a follower printed:\n%s\nwant it to name the leader", out)
	}
	if out := topCLI(t, m.parent, "--once"); strings.Contains(out, "region ") {
		t.Fatalf("rlnode top --once on the parent printed a region section:\n%s", out)
	}

	// The status page shows the same, where a browser is at hand (CI
	// installs chromium).
	path := chromiumPath()
	if path == "" {
		t.Log("no chromium on PATH: the status page's region section is not checked")
		return
	}
	b := startBrowser(t, path)
	b.run("open /ui on the region's leader", chromedp.Navigate(leader.URL()+"/ui"))
	b.run("type the token", chromedp.SendKeys(chromedp.ID("token"), polToken), chromedp.Click(chromedp.CSS(`#token-form button[type=submit]`)))
	b.poll("the region section shows the key and the parent", fmt.Sprintf(`(() => {
		const r = document.querySelector('#region-keys tr[data-policy="g"][data-key="alice"]');
		return !document.getElementById("region").hidden && r !== null && r.children[4].textContent === %q &&
			document.getElementById("region-summary").textContent.includes("parent up, round trip");
	})()`, fmt.Sprint(k.Spent)))
	b.run("open /ui on the parent", chromedp.Navigate(m.parent.URL()+"/ui"))
	b.poll("the parent's page has members and no region section", `document.querySelectorAll('#members tbody tr').length > 0 && document.getElementById("region").hidden`)
}

// TestAttackRegionViewFloodOnAFollower: with 300 global keys warm in a
// region, 400 requests for GET /v1/cluster/region at once on a follower
// each list at most 100 keys, most spent first, and the follower reads
// its state machine's slice counters at most once a second however many
// ask (the answers name at most one reading, statsReadAtMs, per second
// of the flood).
func TestAttackRegionViewFloodOnAFollower(t *testing.T) {
	proctest.Long(t)
	m := startRegions(t, 5*time.Millisecond, map[string]regionSpec{"eu": {nodes: 3, extra: []string{"--cluster-token", polToken}}})
	m.globalPolicy(t, "g", 1_000_000, "1h")
	leader, follower := followerOf(t, m.nodes["eu"])

	const keys = 300
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	for w := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; ctx.Err() == nil; i = (i + 10) % keys {
				hitOnce(leader.URL(), "eu", "g", fmt.Sprintf("c%03d", i))
			}
		}()
	}
	proctest.Poll(t, 30*time.Second, func() error {
		v, err := regionViewOf(follower)
		if err == nil && v.KeysTotal < keys {
			err = fmt.Errorf("follower's view: %d keys with slices, want %d", v.KeysTotal, keys)
		}
		return err
	})

	type answer struct {
		at   time.Time
		body httpapi.RegionBody
		err  error
	}
	const askers, each = 40, 10
	answers := make(chan answer, askers*each)
	floodStart := time.Now()
	var flood sync.WaitGroup
	for range askers {
		flood.Add(1)
		go func() {
			defer flood.Done()
			for range each {
				b, err := regionViewOf(follower)
				answers <- answer{at: time.Now(), body: b, err: err}
			}
		}()
	}
	flood.Wait()
	elapsed := time.Since(floodStart)
	close(answers)
	readings := map[int64]bool{}
	n := 0
	for a := range answers {
		if a.err != nil {
			t.Fatal(a.err)
		}
		b := a.body
		if len(b.Keys) > 100 || b.KeysTotal < keys || b.Holder || !slices.IsSortedFunc(b.Keys, func(x, y httpapi.RegionKey) int { return cmp.Compare(y.Spent, x.Spent) }) {
			t.Fatalf("follower's view lists %d of %d keys (holder %v), want at most 100 of at least %d, most spent first", len(b.Keys), b.KeysTotal, b.Holder, keys)
		}
		readings[b.StatsReadAtMs] = true
		n++
	}
	groups := len(readings)
	if most := int(elapsed/time.Second) + 2; groups > most {
		t.Fatalf("%d answers in %s came from %d readings of the state machine, want at most %d (one a second)", n, elapsed, groups, most)
	}
	t.Logf("%d answers in %s from %d readings of the slice counters", n, elapsed.Round(time.Millisecond), groups)
}
