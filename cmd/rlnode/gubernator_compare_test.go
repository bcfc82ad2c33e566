package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
	"github.com/rlnode/rlnode/internal/testprog"
)

// gubernatorVersion is the release the comparison runs against.
const gubernatorVersion = "v2.13.0"

// buildGubernator builds gubernator's server and the comparison driver
// (testdata/gubcompare, gubernator's own client) from the Go module proxy
// into dir, or says why it cannot.
func buildGubernator(t *testing.T, dir string) (server, driver string, skip string) {
	t.Helper()
	src := gubClientModule(t, dir)
	server, driver = filepath.Join(dir, "gubernator"), filepath.Join(dir, "gubcompare")
	if skip = buildInGubModule(src, driver, "."); skip == "" {
		skip = buildInGubModule(src, server, "github.com/gubernator-io/gubernator/v2/cmd/gubernator")
	}
	return server, driver, skip
}

// gubClientModule copies testdata/gubcompare, a module that requires
// gubernator's client at gubernatorVersion, into dir/src and returns it.
func gubClientModule(t *testing.T, dir string) string {
	t.Helper()
	src := filepath.Join(dir, "src")
	if err := os.CopyFS(src, os.DirFS("testdata/gubcompare")); err != nil {
		t.Fatal(err)
	}
	return src
}

// buildInGubModule builds pkg of the module in src to out, fetching what
// it needs from the Go module proxy; it returns why it could not, or "".
func buildInGubModule(src, out, pkg string) string {
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Sprintf("cannot build %s with gubernator %s from the module proxy: %v\n%s", pkg, gubernatorVersion, err, b)
	}
	return ""
}

// startGubernator runs one gubernator node on loopback (memberlist with
// itself as the only known node; UTC, as rlnode's Gregorian periods).
func startGubernator(t *testing.T, bin string) string {
	t.Helper()
	grpcAddr, httpAddr, ml := proctest.FreeAddr(t), proctest.FreeAddr(t), proctest.FreeAddr(t)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "TZ=UTC", "GUBER_GRPC_ADDRESS="+grpcAddr, "GUBER_HTTP_ADDRESS="+httpAddr, "GUBER_ADVERTISE_ADDRESS="+grpcAddr,
		"GUBER_MEMBERLIST_ADDRESS="+ml, "GUBER_MEMBERLIST_BIND_ADDRESS="+ml, "GUBER_MEMBERLIST_KNOWN_NODES="+ml)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	proctest.Poll(t, 30*time.Second, func() error {
		r, err := proctest.Get("http://" + httpAddr + "/v1/HealthCheck")
		if err != nil || !strings.Contains(string(r.Raw), `"peer_count":1`) {
			return fmt.Errorf("gubernator not healthy yet: %v %s", err, r.Raw)
		}
		return nil
	})
	return grpcAddr
}

type gubStep struct {
	SleepMs  int64            `json:"sleepMs"`
	Requests []map[string]any `json:"requests"`
}

type gubAnswer struct {
	SentMs int64  `json:"sentMs"`
	Err    string `json:"err"`
	Items  []struct {
		Status    string `json:"status"`
		Limit     int64  `json:"limit"`
		Remaining int64  `json:"remaining"`
		Error     string `json:"error"`
		ResetIn   *int64 `json:"resetIn"`
	} `json:"items"`
}

// comparisonScript is the sequence both servers answer: token bucket hits,
// a limit change up and down, more than remains, DRAIN_OVER_LIMIT, the
// over-limit status kept, RESET_REMAINING, a new key asked for more than
// its limit, a read of 0 hits, a leaky bucket with leaks, drain, reset and
// a burst change, Gregorian days of both, and a mixed batch with bad items.
func comparisonScript() []gubStep {
	tok := func(key string, hits, limit int64, behavior int) map[string]any {
		return map[string]any{"name": "cmp_token", "unique_key": key, "hits": hits, "limit": limit, "duration": 60_000, "behavior": behavior}
	}
	leaky := func(hits, burst int64, behavior int) map[string]any {
		return map[string]any{"name": "cmp_leaky", "unique_key": "k", "hits": hits, "limit": 10, "duration": 10_000, "burst": burst,
			"algorithm": "LEAKY_BUCKET", "behavior": behavior}
	}
	const drain, reset, gregorian = 32, 8, 4
	one := func(r map[string]any) gubStep { return gubStep{Requests: []map[string]any{r}} }
	s := []gubStep{
		one(tok("a", 1, 100, 0)), one(tok("a", 1, 100, 0)), one(tok("a", 1, 10, 0)), one(tok("a", 1, 10, 0)),
		one(tok("a", 1, 200, 0)), one(tok("a", 300, 200, 0)), one(tok("a", 300, 200, drain)), one(tok("a", 1, 200, 0)),
		one(tok("a", 0, 200, 0)), one(tok("a", 1, 200, reset)), one(tok("a", 1, 200, 0)),
		one(tok("b", 11, 10, 0)), one(tok("b", 1, 10, 0)), one(tok("c", 0, 10, 0)), one(tok("c", 10, 10, 0)), one(tok("c", 0, 10, 0)),
		one(leaky(3, 0, 0)), one(leaky(5, 0, 0)), one(leaky(5, 0, 0)),
		{SleepMs: 1500, Requests: []map[string]any{leaky(0, 0, 0)}},
		one(leaky(10, 0, drain)), one(leaky(1, 0, reset)), one(leaky(1, 15, 0)), one(leaky(20, 15, 0)),
		one(map[string]any{"name": "cmp_greg", "unique_key": "g", "hits": 1, "limit": 5, "duration": 2, "behavior": gregorian}),
		one(map[string]any{"name": "cmp_greg", "unique_key": "g", "hits": 1, "limit": 5, "duration": 2, "behavior": gregorian}),
		one(map[string]any{"name": "cmp_greg", "unique_key": "l", "hits": 1, "limit": 10, "duration": 2, "behavior": gregorian, "algorithm": "LEAKY_BUCKET"}),
		one(map[string]any{"name": "cmp_greg", "unique_key": "l", "hits": 1, "limit": 10, "duration": 2, "behavior": gregorian, "algorithm": "LEAKY_BUCKET"}),
		{Requests: []map[string]any{
			tok("d", 1, 5, 0), {"name": "cmp_token", "hits": 1, "limit": 5, "duration": 1000}, {"unique_key": "x", "hits": 1, "limit": 5, "duration": 1000},
			leaky(2, 0, 0), tok("d", 4, 5, 0), tok("d", 1, 5, 0),
		}},
	}
	return s
}

func runScript(driver, addr string, script []byte) ([]gubAnswer, error) {
	cmd := exec.Command(driver, addr)
	cmd.Stdin = bytes.NewReader(script)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("driver against %s: %w\n%s", addr, err, stderr.String())
	}
	var answers []gubAnswer
	if err := json.Unmarshal(out, &answers); err != nil {
		return nil, fmt.Errorf("driver output: %w\n%s", err, out)
	}
	return answers, nil
}

// TestGubernatorComparison builds gubernator v2.13.0 from the Go module
// proxy, runs one node of it and one rlnode node on loopback, sends both
// the same script with gubernator's own Go client, and compares status,
// limit and remaining exactly and reset times within a second. It skips,
// saying why, when gubernator cannot be built here (no module proxy).
func TestGubernatorComparison(t *testing.T) {
	proctest.Long(t)
	server, driver, skip := buildGubernator(t, t.TempDir())
	if skip != "" {
		// Named with the other missing programs at the end of the run.
		testprog.Missing(t, "gubernator "+gubernatorVersion, "needs the Go module proxy (GOPROXY) reachable", skip)
	}
	gubAddr := startGubernator(t, server)
	rlAddr := proctest.FreeAddr(t)
	node := proctest.StartNode(t, rlnodeBin, "n1", "--gubernator-addr", rlAddr)
	proctest.WaitReady(t, node, 15*time.Second)

	script, err := json.Marshal(comparisonScript())
	if err != nil {
		t.Fatal(err)
	}
	// Both at once, so their sleeps and clocks line up.
	var gub, rl []gubAnswer
	var gubErr error
	done := make(chan struct{})
	go func() { gub, gubErr = runScript(driver, gubAddr, script); close(done) }()
	rl, err = runScript(driver, rlAddr, script)
	<-done
	if err = errors.Join(gubErr, err); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d steps compared, %d items", len(gub), countItems(gub))
	if len(gub) != len(rl) {
		t.Fatalf("%d answers from gubernator, %d from rlnode", len(gub), len(rl))
	}
	for i := range gub {
		g, r := gub[i], rl[i]
		if (g.Err == "") != (r.Err == "") || len(g.Items) != len(r.Items) {
			t.Errorf("step %d: gubernator %+v, rlnode %+v", i, g, r)
			continue
		}
		for j := range g.Items {
			gi, ri := g.Items[j], r.Items[j]
			switch {
			case gi.Status != ri.Status || gi.Limit != ri.Limit || gi.Remaining != ri.Remaining || (gi.Error == "") != (ri.Error == ""):
			case strings.HasPrefix(gi.Error, "field ") && gi.Error != ri.Error:
			case (gi.ResetIn == nil) != (ri.ResetIn == nil):
			case gi.ResetIn != nil && abs(*gi.ResetIn-*ri.ResetIn) > 1000:
			default:
				continue
			}
			t.Errorf("step %d item %d: gubernator %+v (reset in %v), rlnode %+v (reset in %v)", i, j, gi, ptr(gi.ResetIn), ri, ptr(ri.ResetIn))
		}
	}
}

func countItems(as []gubAnswer) (n int) {
	for _, a := range as {
		n += len(a.Items)
	}
	return n
}

func abs(v int64) int64 { return max(v, -v) }

func ptr(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestGubernatorGlobalWithItsClient: gubernator's own Go client, unchanged,
// hammers one key of 1,000 per minute through three rlnode nodes for 3 s
// (four callers a node, batches of one to three items): with BATCHING and
// with GLOBAL 950 to 1,000 are allowed (never more), and with GLOBAL most
// answers come from the nodes' leases.
func TestGubernatorGlobalWithItsClient(t *testing.T) {
	proctest.Long(t)
	_, driver, skip := buildGubernator(t, t.TempDir())
	if skip != "" {
		testprog.Missing(t, "gubernator "+gubernatorVersion, "needs the Go module proxy (GOPROXY) reachable", skip)
	}
	nodes, _ := gubNodesOf(t, rlnodeBin, "", 3)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Args[slices.Index(n.Args, "--gubernator-addr")+1])
	}
	for _, b := range []string{"BATCHING", "GLOBAL"} {
		out, err := exec.Command(driver, "-hammer", strings.Join(addrs, ","), "hammer", b, b).Output()
		if err != nil {
			t.Fatalf("%s: the driver failed: %v", b, err)
		}
		var got struct{ Allowed, Answered int64 }
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%s: %v: %s", b, err, out)
		}
		local := int64(0)
		for _, n := range nodes {
			local += leaseMetric(t, n.URL(), "rlnode_lease_local_decisions_total")
		}
		t.Logf("%s: %d allowed of %d answered, %d answered from node leases in all", b, got.Allowed, got.Answered, local)
		if got.Allowed < 950 || got.Allowed > 1000 || got.Answered < 1100 {
			t.Fatalf("%s: %d allowed of %d answered; want 950 to 1,000 of more than 1,100", b, got.Allowed, got.Answered)
		}
		if b == "GLOBAL" && local < got.Answered/2 {
			t.Fatalf("GLOBAL: %d of %d answers from node leases, want at least half", local, got.Answered)
		}
	}
}
