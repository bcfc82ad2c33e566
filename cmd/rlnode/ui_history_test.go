package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// alignedHeadersJS is true when, in every table of the page, each body
// cell's text sits under its column's header: the same text-align, and
// the header's text and the cell's text overlap horizontally.
const alignedHeadersJS = `(() => {
	const textBox = (el) => { const r = document.createRange(); r.selectNodeContents(el); return r.getBoundingClientRect(); };
	const bad = [];
	let checked = 0;
	for (const table of document.querySelectorAll("main table")) {
		const heads = [...table.tHead.rows[0].cells];
		for (const row of table.tBodies[0].rows) {
			if ([...row.cells].some((c) => c.colSpan > 1)) continue;
			[...row.cells].forEach((td, i) => {
				const th = heads[i];
				if (!th || td.textContent.trim() === "") return;
				const a = textBox(th), b = textBox(td);
				checked++;
				if (getComputedStyle(th).textAlign !== getComputedStyle(td).textAlign || a.right < b.left || b.right < a.left) {
					bad.push(table.id + ": " + th.textContent + " over " + td.textContent);
				}
			});
		}
	}
	return checked > 0 && bad.length === 0 ? "" : (checked + " checked; " + bad.join("; "));
})()`

// TestStatusPageOpenedAfterTrafficShowsIt: traffic first, the page after:
// its charts draw the node's history at once (with a rate and a time
// axis), and every table's headers sit over their columns.
func TestStatusPageOpenedAfterTrafficShowsIt(t *testing.T) {
	browser := chromium(t)
	n := proctest.StartNode(t, rlnodeBin, "n1", "--cluster-token", polToken)
	proctest.WaitReady(t, n, 20*time.Second)
	proctest.Poll(t, 20*time.Second, func() error {
		r, err := n.Do("PUT", "/v1/policies/login", polToken, map[string]any{"algorithm": "fixed_window", "limits": []map[string]any{{"limit": 3, "window": "1h"}}})
		if err != nil || r.Status != 200 {
			return fmt.Errorf("set login: %v %d %s", err, r.Status, r.Raw)
		}
		return nil
	})
	for i := 0; i < 40; i++ { // 3 allowed, 37 refused
		proctest.MustGet(t, n.URL()+"/check/login/mallory")
		proctest.MustGet(t, n.URL()+fmt.Sprintf("/check/user-%d", i))
	}
	time.Sleep(time.Second) // the traffic is over before the page opens
	opened := time.Now().UnixMilli()

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1280, 900))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancelBrowser := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	eval := func(expr string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return v
	}
	run("open /ui", chromedp.Navigate(n.URL()+"/ui"))
	run("type the token", chromedp.SendKeys(chromedp.ID("token"), polToken), chromedp.Click(chromedp.CSS(`#token-form button[type=submit]`)))
	run("the login chart appears", chromedp.Poll[chromedp.Void](`document.querySelector('#charts svg[data-policy="login"]') !== null`,
		chromedp.WithPollingTimeout(60*time.Second), chromedp.WithPollingInterval(100*time.Millisecond)))
	// At its first drawing, not after the page has watched for a while.
	chart := eval(`(() => {
		const svg = document.querySelector('#charts svg[data-policy="login"]');
		const refused = svg.querySelector("polyline.refused"), allowed = svg.querySelector("polyline.allowed");
		return [svg.dataset.fromMs, refused && refused.dataset.nonzero, allowed && allowed.dataset.nonzero,
			svg.querySelectorAll("line.axis").length, svg.querySelectorAll("text.tick-label").length,
			[...svg.querySelectorAll("text.tick-label")].map((e) => e.textContent).join(",")].join(" ");
	})()`)
	var from, refusedSteps, allowedSteps, axes, labels int64
	var labelText string
	if _, err := fmt.Sscan(chart, &from, &refusedSteps, &allowedSteps, &axes, &labels, &labelText); err != nil ||
		from >= opened || refusedSteps < 1 || allowedSteps < 1 || axes != 2 || labels < 6 {
		t.Fatalf("the login chart of a page opened after the traffic: %q (from, refused steps, allowed steps, axes, labels); "+
			"want it drawn from before the page opened (%d), with refused and allowed hits, two axes and their labels", chart, opened)
	}
	if bad := eval(alignedHeadersJS); bad != "" {
		t.Fatalf("table headers not over their columns: %s", bad)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err == nil {
		path := filepath.Join(artefactDir(t), "status-page-history.png")
		if os.WriteFile(path, png, 0o644) == nil {
			t.Logf("status page screenshot: %s", path)
		}
	}
}

// TestTopHistoryIsGuardedAndBounded: the rate history behind the charts is
// admin data like the rest of /v1/top (401 without the token), its
// parameter takes 0 or 1 only, and a flood of hits on many keys keeps it
// to one point per 5 s step for the last 10 minutes.
func TestTopHistoryIsGuardedAndBounded(t *testing.T) {
	n := proctest.StartNode(t, rlnodeBin, "n1", "--cluster-token", polToken)
	proctest.WaitReady(t, n, 20*time.Second)
	for i := 0; i < 300; i++ {
		proctest.Get(n.URL() + fmt.Sprintf("/check/flood-%d", i))
	}
	if r, _ := n.Do("GET", "/v1/top?history=1", "", nil); r.Status != 401 {
		t.Fatalf("history without the token: %d %s; want 401", r.Status, r.Raw)
	}
	for _, q := range []string{"history=2", "history=yes", "History=1"} {
		if r, _ := n.Do("GET", "/v1/top?"+q, polToken, nil); r.Status != 400 {
			t.Fatalf("GET /v1/top?%s: %d %s; want 400", q, r.Status, r.Raw)
		}
	}
	var body struct {
		History []struct {
			Policy string `json:"policy"`
			StepMs int64  `json:"stepMs"`
			Points []struct {
				Allowed uint64 `json:"allowed"`
			} `json:"points"`
		} `json:"history"`
	}
	proctest.Poll(t, 10*time.Second, func() error {
		r, err := n.Do("GET", "/v1/top?history=1", polToken, nil)
		if err != nil || r.Status != 200 {
			return fmt.Errorf("GET /v1/top?history=1: %v %d %s", err, r.Status, r.Raw)
		}
		if err := json.Unmarshal(r.Raw, &body); err != nil {
			return err
		}
		total := uint64(0)
		for _, h := range body.History {
			for _, p := range h.Points {
				total += p.Allowed
			}
		}
		if len(body.History) != 1 || body.History[0].Policy != "default" || total < 10 {
			return fmt.Errorf("history %s; want default's allowed hits", r.Raw)
		}
		return nil
	})
	if h := body.History[0]; h.StepMs != 5000 || len(h.Points) != 120 {
		t.Fatalf("history of default: step %d ms, %d points; want 5000 and 120 (10 minutes)", h.StepMs, len(h.Points))
	}
}
