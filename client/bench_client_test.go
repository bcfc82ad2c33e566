package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/client"
)

// The Go client's remote path against wrk on the same node: a real
// single-node rlnode process (its own process, as wrk is), a leased policy
// answered from the node's memory (the cheapest answer, so the client's own
// cost shows the most), 100 keys; wrk -t2 at C connections and C goroutines
// of Client.Check, interleaved, 5 rounds of 5 s each, medians. Run with
//
//	RLNODE_BENCH_CLIENT=1 go test ./client -run TestBenchClientVsWrk -v
//
// RLNODE_BENCH_CONNS (default 64), RLNODE_BENCH_ROUNDS (5) and
// RLNODE_BENCH_PATH ("leased", or "strict": every hit through the log)
// change the run. Figures, not asserts: the machine is shared.
func TestBenchClientVsWrk(t *testing.T) {
	if os.Getenv("RLNODE_BENCH_CLIENT") == "" {
		t.Skip("benchmark: set RLNODE_BENCH_CLIENT=1")
	}
	wrk, err := exec.LookPath("wrk")
	if err != nil {
		t.Skip("wrk is not installed (Debian: apt-get install wrk)")
	}
	conns := envInt("RLNODE_BENCH_CONNS", 64)
	rounds := envInt("RLNODE_BENCH_ROUNDS", 5)
	const keys, d = 100, 5 * time.Second
	policyName := "lhot"
	consistency := "leased"
	if os.Getenv("RLNODE_BENCH_PATH") == "strict" {
		policyName, consistency = "hstrict", "strict"
	}

	addr := startBenchNode(t)
	body, _ := json.Marshal(map[string]any{"name": policyName, "algorithm": "fixed_window", "consistency": consistency,
		"limits": []map[string]any{{"limit": 1_000_000_000, "window": "60s"}}})
	req, _ := http.NewRequest(http.MethodPut, "http://"+addr+"/v1/policies/"+policyName, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode/100 != 2 {
		t.Fatalf("PUT policy: %v %v", err, resp)
	}
	resp.Body.Close()

	c := newClient(t, client.Config{Addrs: []string{addr}})
	keyNames := make([]string, keys)
	for i := range keyNames {
		keyNames[i] = fmt.Sprintf("c%015d", i)
	}
	// CPU per request of each load generator: robust to a busy machine,
	// unlike throughput. The node's own is the same for both.
	var wrkCPU, goCPU []float64
	goRound := func() float64 {
		var errs atomic.Int64
		cpu0 := selfCPU()
		r := runRound(conns, d, func() bool {
			_, err := c.Check(context.Background(), policyName, keyNames[rand.IntN(keys)], 1)
			if err != nil {
				errs.Add(1)
			}
			return err == nil
		})
		if n := errs.Load(); n > 0 {
			t.Logf("client round: %d errors", n)
		}
		goCPU = append(goCPU, float64(selfCPU()-cpu0)/float64(time.Microsecond)/(r.perSec*d.Seconds()))
		return r.perSec
	}
	out := filepath.Join(t.TempDir(), "wrk.json")
	script, err := filepath.Abs("../scripts/bench_wrk.lua")
	if err != nil {
		t.Fatal(err)
	}
	wrkRound := func() float64 {
		cmd := exec.Command(wrk, "-t2", "-c"+strconv.Itoa(conns), "-d"+strconv.Itoa(int(d.Seconds()))+"s", "--timeout", "10s",
			"-s", script, "http://"+addr)
		cmd.Env = append(os.Environ(), "BENCH_WRK_PATH=/check/"+policyName+"/{key}", "BENCH_WRK_KEYS="+strconv.Itoa(keys),
			"BENCH_WRK_OUT="+out, "BENCH_WRK_CONNS="+strconv.Itoa(conns))
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("wrk: %v\n%s", err, b)
		}
		var res struct {
			Throughput float64 `json:"throughputRps"`
			Errors     int     `json:"errors"`
		}
		b, _ := os.ReadFile(out)
		if err := json.Unmarshal(b, &res); err != nil {
			t.Fatalf("wrk output %s: %v", b, err)
		}
		if res.Errors > 0 {
			t.Logf("wrk round: %d errors", res.Errors)
		}
		cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		wrkCPU = append(wrkCPU, float64(cpu)/float64(time.Microsecond)/(res.Throughput*d.Seconds()))
		return res.Throughput
	}
	// Warm both up (connections, the node's leases).
	runRound(conns, time.Second, func() bool { _, err := c.Check(context.Background(), policyName, keyNames[0], 1); return err == nil })
	var w, g []float64
	for i := 0; i < rounds; i++ {
		// Alternate which goes first, so a neighbour's burst does not
		// always land on the same side.
		if i%2 == 0 {
			w = append(w, wrkRound())
			g = append(g, goRound())
		} else {
			g = append(g, goRound())
			w = append(w, wrkRound())
		}
		t.Logf("round %d: wrk %.0f/s (%.1f us CPU/req), Client.Check %.0f/s (%.1f us CPU/req): %.2fx", i+1,
			w[i], wrkCPU[i], g[i], goCPU[i], g[i]/w[i])
	}
	mw, mg := median(w), median(g)
	t.Logf("%s /check, %d keys, %d connections / goroutines, medians of %d rounds of %s: wrk %.0f/s (%.1f us CPU/req), Client.Check %.0f/s (%.1f us CPU/req): %.2fx",
		consistency, keys, conns, rounds, d, mw, median(wrkCPU), mg, median(goCPU), mg/mw)
}

// selfCPU is this process's user and system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// startBenchNode builds rlnode and starts a single-node cluster of it on
// loopback; it returns the node's HTTP address.
func startBenchNode(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "rlnode")
	if b, err := exec.Command("go", "build", "-o", bin, "../cmd/rlnode").CombinedOutput(); err != nil {
		t.Fatalf("build rlnode: %v\n%s", err, b)
	}
	httpAddr, raftAddr := freeLoopback(t), freeLoopback(t)
	cmd := exec.Command(bin, "serve", "--id", "n1", "--http-addr", httpAddr, "--raft-addr", raftAddr,
		"--data-dir", filepath.Join(dir, "data"))
	log, err := os.Create(filepath.Join(dir, "node.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		log.Close()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return httpAddr
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(log.Name())
			t.Fatalf("node not ready after 30s: %v\n%s", err, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freeLoopback(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
