package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeNode imitates rlnode's /check: the first limit hits per client are
// allowed (200), the rest refused (429). It tallies what it answered so the
// tests can compare the benchmark's view with the server's.
type fakeNode struct {
	limit int
	token string

	mu      sync.Mutex
	hits    map[string]int
	allowed int64
	refused int64
	total   int64
}

func newFakeNode(t *testing.T, limit int, token string) (*fakeNode, *httptest.Server) {
	f := &fakeNode{limit: limit, token: token, hits: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /check/{client}", f.check)
	mux.HandleFunc("GET /fail/{client}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"title":"no leader","status":503,"code":"no_leader"}`)
	})
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /slow", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /hang", func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeNode) check(w http.ResponseWriter, r *http.Request) {
	if f.token != "" && r.Header.Get("Authorization") != "Bearer "+f.token {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	client := r.PathValue("client")
	if len(client) != 16 {
		http.Error(w, "bad client id "+client, http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.total++
	f.hits[client]++
	ok := f.hits[client] <= f.limit
	if ok {
		f.allowed++
	} else {
		f.refused++
	}
	f.mu.Unlock()
	if ok {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"allowed":true,"remaining":1,"limit":5}`)
		return
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(http.StatusTooManyRequests)
	io.WriteString(w, `{"status":429,"allowed":false,"remaining":0}`)
}

func (f *fakeNode) snapshot() (allowed, refused, total int64, hits map[string]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.allowed, f.refused, f.total, maps.Clone(f.hits)
}

func run(t *testing.T, cfg Config) Result {
	t.Helper()
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	checkInvariants(t, res)
	return res
}

func checkInvariants(t *testing.T, res Result) {
	t.Helper()
	if res.Requests != res.OK+res.Refused+res.Errors {
		t.Errorf("requests %d != ok %d + refused %d + errors %d", res.Requests, res.OK, res.Refused, res.Errors)
	}
	var kinds int64
	for _, n := range res.ErrorKinds {
		kinds += n
	}
	if kinds != res.Errors {
		t.Errorf("error kinds %v sum to %d, want errors = %d", res.ErrorKinds, kinds, res.Errors)
	}
	if res.OK+res.Refused > 0 {
		l := res.Latency
		if l.P50 <= 0 || l.Mean <= 0 {
			t.Errorf("latency must be > 0: %+v", l)
		}
		if !(l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
			t.Errorf("percentiles out of order: %+v", l)
		}
	}
}

func TestClosedLoopMatchesServer(t *testing.T) {
	node, srv := newFakeNode(t, 5, "s3cret")
	res := run(t, Config{
		Addrs:       []string{srv.URL, srv.URL + "/"}, // two "nodes" exercise round-robin
		Concurrency: 8,
		Duration:    400 * time.Millisecond,
		Keys:        50,
		Token:       "s3cret",
	})
	allowed, refused, total, hits := node.snapshot()
	t.Logf("result: %+v", res)
	if res.Mode != "closed" || res.Concurrency != 8 || res.Rate != 0 {
		t.Errorf("mode/concurrency/rate = %q/%d/%v", res.Mode, res.Concurrency, res.Rate)
	}
	if res.Errors != 0 {
		t.Fatalf("unexpected errors: %v", res.ErrorKinds)
	}
	if res.Requests < 100 {
		t.Fatalf("only %d requests in 400ms", res.Requests)
	}
	// Without warmup or cancellation every request the server answered is
	// counted, once.
	if res.Requests != total || res.OK != allowed || res.Allowed != allowed || res.Refused != refused {
		t.Errorf("bench saw %d requests, %d ok, %d allowed, %d refused; server answered %d, %d allowed, %d refused",
			res.Requests, res.OK, res.Allowed, res.Refused, total, allowed, refused)
	}
	if len(hits) > 50 || res.OK > 50*5 {
		t.Errorf("keys beyond --keys: %d distinct ids, %d allowed", len(hits), res.OK)
	}
	if res.Duration <= 0 || res.Duration > 400*time.Millisecond {
		t.Errorf("measured duration %v, want (0, 400ms]", res.Duration)
	}
	if res.Throughput <= 0 || res.Goodput != res.Throughput {
		t.Errorf("throughput %v, goodput %v: want equal and > 0 without errors", res.Throughput, res.Goodput)
	}
}

func TestErrorsAreClassified(t *testing.T) {
	_, srv := newFakeNode(t, 1, "")
	res := run(t, Config{Addrs: []string{srv.URL}, Concurrency: 4, Duration: 200 * time.Millisecond, Path: "/fail/{key}"})
	if res.Requests == 0 || res.Errors != res.Requests || res.ErrorKinds["503:no_leader"] != res.Errors {
		t.Errorf("want every request to be a 503:no_leader error, got %d requests, kinds %v", res.Requests, res.ErrorKinds)
	}
	if res.Goodput != 0 || res.Latency != (Latency{}) {
		t.Errorf("errors must not count as goodput or latency: %v, %+v", res.Goodput, res.Latency)
	}

	// A node that is down: its share of requests fails with conn_refused,
	// the live node's share is still served.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	res = run(t, Config{Addrs: []string{srv.URL, dead}, Concurrency: 4, Duration: 200 * time.Millisecond, Path: "/livez"})
	if res.ErrorKinds["conn_refused"] == 0 || res.OK == 0 {
		t.Errorf("want both conn_refused errors and ok responses, got ok %d, kinds %v", res.OK, res.ErrorKinds)
	}
}

func TestOpenLoopRate(t *testing.T) {
	_, srv := newFakeNode(t, 1, "")
	const rate, dur = 1000.0, time.Second
	res := run(t, Config{Addrs: []string{srv.URL}, Rate: rate, Duration: dur, Path: "/livez"})
	t.Logf("result: %+v", res)
	if res.Mode != "open" || res.Concurrency != DefaultOpenConcurrency {
		t.Errorf("mode %q concurrency %d", res.Mode, res.Concurrency)
	}
	want := rate * dur.Seconds()
	if got := float64(res.Requests); got < 0.5*want || got > 1.5*want {
		t.Errorf("sent %v requests at %v/s for %v, want within 50%%..150%% of %v", got, rate, dur, want)
	}
	if res.OK != res.Requests {
		t.Errorf("errors against /livez: %v", res.ErrorKinds)
	}
}

// TestOpenLoopDropsWhenSaturated: a server slower than the schedule must
// show up as dropped requests, not as a quietly lower send rate, and the
// latency must reflect the server's 20ms.
func TestOpenLoopDropsWhenSaturated(t *testing.T) {
	_, srv := newFakeNode(t, 1, "")
	const rate, dur = 500.0, 500 * time.Millisecond
	res := run(t, Config{Addrs: []string{srv.URL}, Rate: rate, Concurrency: 2, Duration: dur, Path: "/slow"})
	t.Logf("result: %+v", res)
	if res.Dropped == 0 {
		t.Errorf("2 workers cannot serve 500 req/s of 20ms requests, yet nothing was dropped")
	}
	want := rate * dur.Seconds()
	if got := float64(res.Requests + res.Dropped); got < 0.5*want || got > 1.5*want {
		t.Errorf("sent+dropped = %v, want near %v", got, want)
	}
	if res.Latency.P50 < 20*time.Millisecond {
		t.Errorf("p50 %v is below the server's 20ms", res.Latency.P50)
	}
}

func keyCounts(hits map[string]int, keys int) (hottestKey string, hottest, median int) {
	counts := make([]int, keys) // keys never hit count as 0
	i := 0
	for k, n := range hits {
		counts[i] = n
		i++
		if n > hottest {
			hottestKey, hottest = k, n
		}
	}
	slices.Sort(counts)
	return hottestKey, hottest, counts[len(counts)/2]
}

func TestZipfSkewsKeys(t *testing.T) {
	const keys = 100
	for _, dist := range []string{"zipf", "uniform"} {
		node, srv := newFakeNode(t, 1<<30, "")
		res := run(t, Config{Addrs: []string{srv.URL}, Concurrency: 4, Duration: 500 * time.Millisecond, Keys: keys, Dist: dist})
		_, _, total, hits := node.snapshot()
		if total < 300 {
			t.Fatalf("%s: only %d requests, too few to judge the distribution", dist, total)
		}
		if len(hits) > keys {
			t.Fatalf("%s: %d distinct keys, want <= %d", dist, len(hits), keys)
		}
		key, hottest, median := keyCounts(hits, keys)
		share := float64(hottest) / float64(total)
		t.Logf("%s: %d requests (%.0f req/s), hottest %s=%d (%.1f%%), median %d", dist, total, res.Throughput, key, hottest, 100*share, median)
		// Expected hottest share: zipf(1.1) over 100 keys ≈ 23%, uniform 1%.
		switch dist {
		case "zipf":
			if hottest < 10*max(median, 1) || share < 0.10 {
				t.Errorf("zipf: hottest key %d hits (%.1f%%) vs median %d, want >= 10x and >= 10%%", hottest, 100*share, median)
			}
			if key != "c000000000000000" {
				t.Errorf("zipf: hottest key %q, want rank 0", key)
			}
		case "uniform":
			if share > 0.10 {
				t.Errorf("uniform: hottest key has %.1f%% of requests, want < 10%%", 100*share)
			}
		}
	}
}

func TestWarmupIsExcluded(t *testing.T) {
	node, srv := newFakeNode(t, 1<<30, "")
	res := run(t, Config{Addrs: []string{srv.URL}, Concurrency: 2, Warmup: 200 * time.Millisecond, Duration: 300 * time.Millisecond})
	_, _, total, _ := node.snapshot()
	if res.Requests == 0 || res.Requests >= total {
		t.Errorf("bench counted %d of the server's %d requests; warmup ones must be excluded", res.Requests, total)
	}
	if res.Duration > 300*time.Millisecond || res.Duration < 250*time.Millisecond {
		t.Errorf("measured %v, want the 300ms after warmup", res.Duration)
	}
}

func TestCancelStopsEverything(t *testing.T) {
	_, srv := newFakeNode(t, 1, "")
	for _, rate := range []float64{0, 100} {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		start := time.Now()
		res, err := Run(ctx, Config{Addrs: []string{srv.URL}, Concurrency: 4, Rate: rate, Duration: time.Minute, Path: "/hang"})
		cancel()
		if err != nil {
			t.Fatalf("rate %v: Run: %v", rate, err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("rate %v: Run took %v after cancellation at 200ms", rate, took)
		}
		if !res.Interrupted || res.Requests != 0 {
			t.Errorf("rate %v: want interrupted with aborted requests uncounted, got %+v", rate, res)
		}
	}
}

func TestProgressLine(t *testing.T) {
	_, srv := newFakeNode(t, 1, "")
	var buf bytes.Buffer
	run(t, Config{Addrs: []string{srv.URL}, Concurrency: 2, Duration: 700 * time.Millisecond, Path: "/livez", Progress: &buf})
	out := buf.String()
	if !strings.Contains(out, "req/s") || !strings.HasPrefix(out, "\r") || !strings.HasSuffix(out, "\r") {
		t.Errorf("progress output %q", out)
	}
}

func TestValidate(t *testing.T) {
	good := func() Config { return Config{Addrs: []string{"http://127.0.0.1:8080"}} }
	c := good()
	if err := c.Validate(); err != nil {
		t.Fatalf("minimal config: %v", err)
	}
	if c.Concurrency != DefaultConcurrency || c.Duration != DefaultDuration || c.Keys != DefaultKeys || c.Dist != "uniform" || c.Path != DefaultPath {
		t.Errorf("defaults not applied: %+v", c)
	}
	c = good()
	c.Rate = 10
	if err := c.Validate(); err != nil || c.Concurrency != DefaultOpenConcurrency {
		t.Errorf("open loop default concurrency: %d, %v", c.Concurrency, err)
	}
	for name, mod := range map[string]func(*Config){
		"no addrs":      func(c *Config) { c.Addrs = nil },
		"no scheme":     func(c *Config) { c.Addrs = []string{"127.0.0.1:8080"} },
		"bad scheme":    func(c *Config) { c.Addrs = []string{"ftp://host"} },
		"no host":       func(c *Config) { c.Addrs = []string{"http://"} },
		"unparseable":   func(c *Config) { c.Addrs = []string{"http://[::1"} },
		"with path":     func(c *Config) { c.Addrs = []string{"http://host/check"} },
		"concurrency<1": func(c *Config) { c.Concurrency = -1 },
		"rate<0":        func(c *Config) { c.Rate = -5 },
		"duration<0":    func(c *Config) { c.Duration = -time.Second },
		"warmup<0":      func(c *Config) { c.Warmup = -time.Second },
		"keys<1":        func(c *Config) { c.Keys = -1 },
		"unknown dist":  func(c *Config) { c.Dist = "pareto" },
		"relative path": func(c *Config) { c.Path = "check/{key}" },
	} {
		c := good()
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, c)
		}
	}
	if _, err := Run(context.Background(), Config{}); err == nil {
		t.Errorf("Run must reject an invalid config")
	}
}

func TestParseArgs(t *testing.T) {
	t.Setenv("RLNODE_CLUSTER_TOKEN", "from-env")
	var stderr bytes.Buffer
	cfg, asJSON, err := ParseArgs(nil, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if asJSON || !slices.Equal(cfg.Addrs, []string{DefaultAddr}) || cfg.Concurrency != 64 || cfg.Duration != DefaultDuration ||
		cfg.Keys != 1000 || cfg.Dist != "uniform" || cfg.Path != DefaultPath || cfg.Token != "from-env" || cfg.Rate != 0 {
		t.Errorf("defaults: %+v json=%v", cfg, asJSON)
	}

	cfg, asJSON, err = ParseArgs([]string{
		"--addr", "http://10.0.0.1:8080, 10.0.0.2:8080/", "--concurrency", "16", "--rate", "2500",
		"--duration", "30s", "--warmup", "2s", "--keys", "50", "--dist", "zipf", "--path", "/livez",
		"--json", "--cluster-token", "flag-token",
	}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Addrs: []string{"http://10.0.0.1:8080", "http://10.0.0.2:8080"}, Concurrency: 16, Rate: 2500,
		Duration: 30 * time.Second, Warmup: 2 * time.Second, Keys: 50, Dist: "zipf", Path: "/livez", Token: "flag-token",
	}
	if !asJSON || fmt.Sprint(cfg) != fmt.Sprint(want) {
		t.Errorf("got %+v json=%v\nwant %+v", cfg, asJSON, want)
	}

	for _, args := range [][]string{
		{"--dist", "pareto"},
		{"--duration", "0s"},
		{"--keys", "0"},
		{"--concurrency", "-2"},
		{"--rate", "-1"},
		{"--addr", ""},
		{"--bogus"},
		{"extra"},
	} {
		if _, _, err := ParseArgs(args, io.Discard); err == nil {
			t.Errorf("%q: want an error", args)
		}
	}

	stderr.Reset()
	if _, _, err := ParseArgs([]string{"-h"}, &stderr); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: got %v, want flag.ErrHelp", err)
	}
	if !strings.Contains(stderr.String(), "--cluster-token") && !strings.Contains(stderr.String(), "-cluster-token") {
		t.Errorf("usage lacks flags: %s", stderr.String())
	}
	if strings.Contains(stderr.String(), "from-env") {
		t.Errorf("usage leaks the token from the environment")
	}
}

func TestResultOutput(t *testing.T) {
	res := Result{
		Mode: "open", Concurrency: 4096, Rate: 1000, Keys: 10, Dist: "uniform", Path: DefaultPath,
		Duration: 2 * time.Second, Requests: 2000, OK: 1500, Allowed: 1500, Refused: 400, Errors: 100, Dropped: 3,
		ErrorKinds: map[string]int64{"503:no_leader": 90, "timeout": 10},
		Throughput: 1000, Goodput: 950,
		Latency: Latency{P50: 1500 * time.Microsecond, P90: 3 * time.Millisecond, P99: 9 * time.Millisecond,
			P999: 20 * time.Millisecond, Max: 25 * time.Millisecond, Mean: 2 * time.Millisecond},
	}
	var buf bytes.Buffer
	if err := res.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("invalid JSON %s: %v", buf.String(), err)
	}
	for key, want := range map[string]any{
		"mode": "open", "durationMs": 2000.0, "requests": 2000.0, "ok": 1500.0, "allowed": 1500.0,
		"refused": 400.0, "errors": 100.0, "dropped": 3.0, "throughputRps": 1000.0, "goodputRps": 950.0,
		"concurrency": 4096.0, "rate": 1000.0, "interrupted": false,
	} {
		if got[key] != want {
			t.Errorf("JSON %q = %v, want %v", key, got[key], want)
		}
	}
	lat, _ := got["latencyMs"].(map[string]any)
	if lat["p50"] != 1.5 || lat["p999"] != 20.0 || lat["max"] != 25.0 {
		t.Errorf("latencyMs = %v", lat)
	}
	if kinds, _ := got["errorKinds"].(map[string]any); kinds["503:no_leader"] != 90.0 {
		t.Errorf("errorKinds = %v", got["errorKinds"])
	}

	buf.Reset()
	if err := res.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	table := buf.String()
	t.Logf("\n%s", table)
	for _, want := range []string{"open loop", "2000", "503:no_leader=90 timeout=10", "latency p99.9", "20.000 ms", "dropped"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q", want)
		}
	}
}

// --trace: every measured request lands in exactly one second, and a stall
// the server makes shows up as that second's max.
func TestTraceFindsAStall(t *testing.T) {
	var once sync.Once
	start := time.Now()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /check/{client}", func(w http.ResponseWriter, r *http.Request) {
		if time.Since(start) > 1200*time.Millisecond {
			once.Do(func() { time.Sleep(300 * time.Millisecond) })
		}
		io.WriteString(w, "{}")
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	res := run(t, Config{Addrs: []string{srv.URL}, Concurrency: 4, Duration: 3 * time.Second, Keys: 10, Trace: true})
	if len(res.Trace) < 3 {
		t.Fatalf("trace has %d seconds, want at least 3: %+v", len(res.Trace), res.Trace)
	}
	var sum int64
	stalled := false
	for _, s := range res.Trace {
		sum += s.Requests
		if s.Max >= 300*time.Millisecond && s.P99 <= s.Max {
			stalled = true
		}
	}
	if sum != res.Requests {
		t.Fatalf("trace seconds hold %d requests, the run %d", sum, res.Requests)
	}
	if !stalled {
		t.Fatalf("no second shows the 300ms stall: %+v", res.Trace)
	}
	var buf bytes.Buffer
	if err := res.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var j struct {
		Trace []struct {
			Second int     `json:"second"`
			MaxMs  float64 `json:"maxMs"`
		} `json:"trace"`
	}
	if err := json.Unmarshal(buf.Bytes(), &j); err != nil || len(j.Trace) != len(res.Trace) || j.Trace[0].Second != 1 {
		t.Fatalf("JSON trace: %v %+v", err, j.Trace)
	}
	buf.Reset()
	res.WriteTable(&buf)
	if !strings.Contains(buf.String(), "p99 ms") {
		t.Fatalf("table has no trace:\n%s", buf.String())
	}
}
