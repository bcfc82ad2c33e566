package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
	"github.com/rlnode/rlnode/fsm"
)

// chromium finds Debian's chromium (or Chrome); the browser tests skip
// without one. CI installs it (.ci/run).
func chromium(t *testing.T) string {
	t.Helper()
	if p := chromiumPath(); p != "" {
		return p
	}
	t.Skip("no chromium on PATH: apt-get install chromium (CI does) to run the status page's browser test")
	return ""
}

// chromiumPath is chromium's (or Chrome's) path, "" without one.
func chromiumPath() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// artefactDir is $RLNODE_ARTIFACTS when set (CI keeps it), else the
// test's temp dir.
func artefactDir(t *testing.T) string {
	if d := os.Getenv("RLNODE_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err == nil {
			return d
		}
	}
	return t.TempDir()
}

// loadCluster sends hits to every node until the test ends: a client over
// the login limit (refused), a spread of allowed ones, and the extra paths.
func loadCluster(t *testing.T, nodes []*proctest.Node, extra ...string) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				proctest.Get(n.URL() + "/check/login/mallory")
				proctest.Get(n.URL() + fmt.Sprintf("/check/user-%d-%d", i, j%50))
				for _, p := range extra {
					proctest.Get(n.URL() + p)
				}
			}
		}()
	}
	t.Cleanup(func() { close(stop); wg.Wait() })
}

// TestStatusPageInChromium loads /ui in headless chromium against a
// three-node cluster under load: nothing shows without the token; with it
// the page names the leader, lists the refused client, shows a node
// holding a lease for the leased policy's hot key, draws the refused rate
// in the policy's chart and the lease share bar, and shows a killed node
// as unreachable. A screenshot is kept.
func TestStatusPageInChromium(t *testing.T) {
	browser := chromium(t)
	nodes := proctest.StartCluster(t, rlnodeBin, 3, "--cluster-token", polToken)
	leader, _ := followerOf(t, nodes)
	mustStatus(t, mustDo(t, "PUT", leader.URL()+"/v1/policies/login", polToken, `{"algorithm": "fixed_window", "limits": [{"limit": 3, "window": "1h"}]}`), 200, "set login")
	mustStatus(t, mustDo(t, "PUT", leader.URL()+"/v1/policies/feed", polToken, `{"algorithm": "fixed_window", "consistency": "leased", "limits": [{"limit": 1000000, "window": "1h"}]}`), 200, "set feed")
	loadCluster(t, nodes, "/check/feed/hot")
	asked, dead := nodes[0], nodes[1]
	if asked == leader {
		asked, dead = nodes[1], nodes[2]
	} else if dead == leader {
		dead = nodes[2]
	}

	b := startBrowser(t, browser)
	ctx, run, poll, eval := b.ctx, b.run, b.poll, b.eval
	run("open /ui without the token", chromedp.Navigate(asked.URL()+"/ui"))
	poll("the page asks for the token", `document.getElementById("error").textContent.includes("needs the cluster token")`)
	if shown, rows := eval(`document.getElementById("data").hidden ? 0 : 1`), eval(`document.querySelectorAll("#members tbody tr, #top tbody tr").length`); shown != 0 || rows != 0 {
		t.Fatalf("without the token the page shows data (visible %d, %d rows)", shown, rows)
	}
	run("type the token", chromedp.SendKeys(chromedp.ID("token"), polToken), chromedp.Click(chromedp.CSS(`#token-form button[type=submit]`)))
	poll("the page names the leader", fmt.Sprintf(`document.getElementById("summary").dataset.leader === %q && document.querySelector('#members tr[data-role="Leader"]').dataset.member === %q`, leader.ID, leader.ID))
	poll("every member shows its release and log format", fmt.Sprintf(`[...document.querySelectorAll('#members td.version')].length === 3 && `+
		`[...document.querySelectorAll('#members td.version')].every((td) => td.textContent.endsWith(" · format %d")) && `+
		`document.getElementById("summary").textContent.includes("cluster log format %d")`, fsm.CurrentFormat, fsm.CurrentFormat))
	poll("the refused client is in the top list", `document.querySelector('#top tr[data-policy="login"][data-key="mallory"]') !== null`)
	poll("a node holds a lease for the hot key", `[...document.querySelectorAll('#members td.leases')].some((td) => Number(td.dataset.keysHeld) > 0 && Number(td.dataset.decidedLocal) > 0)`)
	// The login chart has drawn a few seconds of its refused rate, above
	// the baseline (mallory is refused on every node all along).
	poll("the login chart draws refused hits", `(() => {
		const l = document.querySelector('#charts svg[data-policy="login"] polyline.refused');
		if (!l || Number(l.dataset.points) < 3) return false;
		const ys = l.getAttribute("points").trim().split(" ").map((p) => Number(p.split(",")[1]));
		return ys.some((y) => y < 74); // above the time axis (y 76)
	})()`)
	poll("the lease share bar names a member", `document.querySelectorAll('#lease-share rect[data-member]').length > 0`)
	dead.Kill()
	poll("the killed node shows as unreachable", fmt.Sprintf(`document.querySelector('#members tr[data-member=%q]').dataset.reachable === "false"`, dead.ID))

	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(artefactDir(t), "status-page.png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("status page screenshot: %s", path)
}

// browser is a headless chromium for one test, with steps that fail the
// test: run (each step 90 s at most), poll (until a JavaScript
// expression is true, 60 s) and eval (an int).
type browser struct {
	t   *testing.T
	ctx context.Context
}

// startBrowser starts chromium at path until the test ends.
func startBrowser(t *testing.T, path string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1280, 900))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelBrowser := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	t.Cleanup(cancelBrowser)
	// The first Run starts the browser for the context's whole life, so
	// it gets no timeout; each step has one.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return &browser{t: t, ctx: ctx}
}

func (b *browser) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	sctx, cancel := context.WithTimeout(b.ctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

func (b *browser) poll(what, expr string) {
	b.t.Helper()
	b.run(what, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(60*time.Second), chromedp.WithPollingInterval(200*time.Millisecond)))
}

func (b *browser) eval(expr string) int {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](expr))
	if err != nil {
		b.t.Fatalf("%s: %v", expr, err)
	}
	return v
}
