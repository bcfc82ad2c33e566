package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// The single-node acceptance test: 10 allowed with remaining 9..0 and
// one resetAt, an 11th refused with Retry-After, a bad id rejected, and the
// spent window still spent after a clean restart on the same data dir.
func TestSingleNodeServeAndRestart(t *testing.T) {
	n := proctest.StartNode(t, rlnodeBin, "solo")
	proctest.WaitReady(t, n, 15*time.Second)
	var resetAt int64
	for i := int64(9); i >= 0; i-- {
		r := proctest.MustGet(t, n.URL()+"/check/alice")
		if r.Status != 200 || r.JSON["allowed"] != true || r.Num("remaining") != i || r.Num("limit") != 10 || r.Num("windowMs") != 60000 {
			t.Fatalf("hit %d: %d %s", 10-i, r.Status, r.Raw)
		}
		if resetAt == 0 {
			resetAt = r.Num("resetAt")
		} else if r.Num("resetAt") != resetAt {
			t.Fatalf("resetAt moved within the window: %d then %d", resetAt, r.Num("resetAt"))
		}
	}
	r := proctest.MustGet(t, n.URL()+"/check/alice")
	if r.Status != 429 || r.JSON["allowed"] != false || r.Num("resetAt") != resetAt {
		t.Fatalf("11th hit: %d %s", r.Status, r.Raw)
	}
	if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
		t.Fatalf("Retry-After %q", r.Header.Get("Retry-After"))
	}
	if r := proctest.MustGet(t, n.URL()+"/check/"+strings.Repeat("z", 300)); r.Status != 400 {
		t.Fatalf("oversized id: %d %s", r.Status, r.Raw)
	}
	if code := n.Signal(syscall.SIGTERM, 15*time.Second); code != 0 {
		t.Fatalf("SIGTERM exit code %d, want 0\n%s", code, n.Output())
	}
	if !strings.Contains(n.Output(), "stopped cleanly") {
		t.Fatalf("no clean shutdown in the log:\n%s", n.Output())
	}
	n.Restart()
	proctest.WaitReady(t, n, 15*time.Second)
	r = proctest.MustGet(t, n.URL()+"/check/alice")
	if r.Status != 429 || r.Num("resetAt") != resetAt {
		t.Fatalf("after restart: %d %s; want the same spent window (resetAt %d)", r.Status, r.Raw, resetAt)
	}
	if !strings.Contains(n.Output(), "not bootstrapping") {
		t.Fatalf("restart bootstrapped again:\n%s", n.Output())
	}
}

func TestServeRefusesBadConfig(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--limit", "0"}, "--limit 0: must be at least 1"},
		{[]string{"--limit", "-5"}, "--limit -5"},
		{[]string{"--window", "-1s"}, "--window -1s: must be a positive duration"},
		{[]string{"--window", "banana"}, "--window banana: \"banana\" is not a duration"},
		{[]string{"--http-addr", "nope"}, "--http-addr"},
		{[]string{"--raft-addr", "0.0.0.0:0"}, "--raft-advertise"},
		{[]string{"--log-level", "loud"}, "--log-level"},
		{[]string{"--headers", "x-ratelimit"}, `for flag -headers: "x-ratelimit": want ietf`},
		{[]string{"--raft-lease-timeout", "5s"}, "need 0 < lease <= heartbeat <= election"},
		{[]string{"--max-batch", "-1"}, "--max-batch -1: must be 1..65536"},
		{[]string{"--max-batch", "0"}, "--max-batch 0: must be 1..65536"},
		{[]string{"--raft-max-append-entries", "2000"}, "--raft-max-append-entries 2000: must be 1..1024"},
		{[]string{"--id", "a\nb"}, "node id contains control character U+000A"},
		{[]string{"--http-advertise", "127.0.0.1:1\r"}, "http address contains control character"},
	}
	for _, c := range cases {
		args := append([]string{"serve", "--data-dir", t.TempDir()}, c.args...)
		_, stderr, code := proctest.Run(t, rlnodeBin, nil, args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("rlnode %v: exit %d, stderr %q; want exit 2 mentioning %q", c.args, code, stderr, c.want)
		}
	}
}

func TestServeRefusesCorruptOrBusyDataDir(t *testing.T) {
	proctest.Long(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "raft.db"), []byte("this is not a bolt database, just junk bytes................"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"serve", "--data-dir", dir, "--http-addr", proctest.FreeAddr(t), "--raft-addr", proctest.FreeAddr(t)}
	// No --raft-log from the environment: the junk raft.db reads as a bolt log.
	_, stderr, code := proctest.Run(t, rlnodeBin, []string{"RLNODE_RAFT_LOG="}, args...)
	if code != 1 || !strings.Contains(stderr, "raft.db is corrupt") {
		t.Fatalf("corrupt raft.db: exit %d, stderr %q", code, stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "raft.db")); !strings.HasPrefix(string(b), "this is not a bolt") {
		t.Fatal("the corrupt file was modified")
	}

	n := proctest.StartNode(t, rlnodeBin, "busy")
	proctest.WaitReady(t, n, 15*time.Second)
	_, stderr, code = proctest.Run(t, rlnodeBin, nil, "serve", "--id", "busy", "--data-dir", n.DataDir,
		"--http-addr", proctest.FreeAddr(t), "--raft-addr", proctest.FreeAddr(t))
	if code != 1 || !strings.Contains(stderr, "locked by another process") {
		t.Fatalf("second process on a busy data dir: exit %d, stderr %q", code, stderr)
	}
	n.Kill()
	_, stderr, code = proctest.Run(t, rlnodeBin, nil, "serve", "--id", "other", "--data-dir", n.DataDir,
		"--http-addr", proctest.FreeAddr(t), "--raft-addr", proctest.FreeAddr(t))
	if code != 1 || !strings.Contains(stderr, `belongs to node "busy"`) {
		t.Fatalf("wrong --id for a data dir: exit %d, stderr %q", code, stderr)
	}
}

// A busy --grpc-addr or --pprof-addr is found before any Raft state is
// touched, as a busy --http-addr is: exit 1 naming the address, and the
// data dir is never created, so a retry on a free port starts clean (not
// as a node that already bootstrapped a cluster of its own).
func TestServeBusySidePortTouchesNoState(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	for _, flag := range []string{"--grpc-addr", "--pprof-addr"} {
		dir := filepath.Join(t.TempDir(), "data")
		_, stderr, code := proctest.Run(t, rlnodeBin, nil, "serve", "--id", "n1", "--data-dir", dir,
			"--http-addr", proctest.FreeAddr(t), "--raft-addr", proctest.FreeAddr(t), flag, addr)
		if code != 1 || !strings.Contains(stderr, addr) || !strings.Contains(stderr, "address already in use") {
			t.Errorf("%s on a busy port: exit %d, stderr %q; want exit 1 naming %s", flag, code, stderr, addr)
		}
		if entries, err := os.ReadDir(dir); !os.IsNotExist(err) {
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			t.Errorf("%s on a busy port left the data dir behind (%v): %v", flag, err, names)
		}
	}
}

func TestGarbageOnRaftPortChangesNothing(t *testing.T) {
	n := proctest.StartNode(t, rlnodeBin, "g")
	proctest.WaitReady(t, n, 15*time.Second)
	proctest.MustGet(t, n.URL()+"/check/x")
	for _, junk := range [][]byte{[]byte("GET / HTTP/1.1\r\n\r\n"), {0, 1, 2, 3, 255, 254}, []byte(strings.Repeat("\xff", 70000))} {
		conn, err := net.Dial("tcp", n.RaftAddr)
		if err != nil {
			t.Fatal(err)
		}
		conn.Write(junk)
		conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		buf := make([]byte, 64)
		conn.Read(buf)
		conn.Close()
	}
	r := proctest.MustGet(t, n.URL()+"/check/x")
	if r.Status != 200 || r.Num("remaining") != 8 {
		t.Fatalf("after garbage on the raft port: %d %s", r.Status, r.Raw)
	}
	if code := n.Wait(100 * time.Millisecond); code != -1 {
		t.Fatalf("process exited with %d after garbage on the raft port", code)
	}
}

func TestMetricsEndpoint(t *testing.T) {
	n := proctest.StartNode(t, rlnodeBin, "m", "--limit", "1")
	proctest.WaitReady(t, n, 15*time.Second)
	proctest.MustGet(t, n.URL()+"/check/secret-client-id")
	proctest.MustGet(t, n.URL()+"/check/secret-client-id")
	r := proctest.MustGet(t, n.URL()+"/metrics")
	body := string(r.Raw)
	for _, want := range []string{
		`rlnode_checks_total{policy="default",result="allowed"} 1`,
		`rlnode_checks_total{policy="default",result="refused"} 1`,
		"rlnode_check_duration_seconds_bucket",
		"rlnode_batch_hits_count",
		"rlnode_forwarded_total 0",
		"rlnode_live_windows 1",
		"rlnode_raft_is_leader 1",
		"rlnode_raft_term",
		"rlnode_raft_applied_index",
		"rlnode_raft_commitTime", // hashicorp/raft's own, through go-metrics
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(body, "secret-client-id") {
		t.Error("/metrics exposes a client id")
	}
}

// rlnode bench against a real node: every request is accounted for and the
// node's own budget shows in the allowed/refused split.
func TestBenchCommandAgainstANode(t *testing.T) {
	proctest.Long(t)
	n := proctest.StartNode(t, rlnodeBin, "b", "--limit", "3")
	proctest.WaitReady(t, n, 15*time.Second)
	out, stderr, code := proctest.Run(t, rlnodeBin, nil, "bench", "--addr", n.URL(), "--duration", "1s", "--concurrency", "4", "--keys", "5", "--json")
	if code != 0 {
		t.Fatalf("rlnode bench: exit %d: %s", code, stderr)
	}
	var res struct {
		Requests, Allowed, Refused, Errors int64
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, out)
	}
	if res.Requests == 0 || res.Errors != 0 || res.Allowed+res.Refused != res.Requests {
		t.Fatalf("bench result %+v", res)
	}
	// 5 keys with a limit of 3 in a 60 s window: exactly 15 allowed.
	if res.Allowed != 15 {
		t.Fatalf("bench saw %d allowed hits, want 15 (5 keys x limit 3)", res.Allowed)
	}
	if _, stderr, code := proctest.Run(t, rlnodeBin, nil, "bench", "--concurrency", "-1"); code != 2 {
		t.Fatalf("bench with a bad flag: exit %d %s", code, stderr)
	}
}

// A node configured from a YAML file and the environment: every setting
// comes from the file unless $RLNODE_<FLAG> or the command line gives it.
func TestServeFromConfigFileAndEnvironment(t *testing.T) {
	n := &proctest.Node{ID: "cfg", HTTPAddr: proctest.FreeAddr(t), RaftAddr: proctest.FreeAddr(t), DataDir: filepath.Join(t.TempDir(), "cfg")}
	file := filepath.Join(t.TempDir(), "rlnode.yaml")
	conf := fmt.Sprintf("id: cfg\nhttp-addr: %s\nraft-addr: %s\ndata-dir: %s\nlimit: 3\nwindow: 1m\n", n.HTTPAddr, n.RaftAddr, n.DataDir)
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("RLNODE_LIMIT", "4") // the environment wins over the file
	n.Proc = proctest.Start(t, rlnodeBin, "cfg", "serve", "--config", file, "--window", "2m")
	proctest.WaitReady(t, n, 15*time.Second)
	for i := 3; i >= 0; i-- {
		r := proctest.MustGet(t, n.URL()+"/check/alice")
		if r.Status != 200 || r.Num("remaining") != int64(i) || r.Num("limit") != 4 || r.Num("windowMs") != 120000 {
			t.Fatalf("hit %d: %d %s; want limit 4 from $RLNODE_LIMIT and a 2m window from the command line", 4-i, r.Status, r.Raw)
		}
	}
	if r := proctest.MustGet(t, n.URL()+"/check/alice"); r.Status != 429 {
		t.Fatalf("5th hit: %d %s", r.Status, r.Raw)
	}
	if _, err := os.Stat(filepath.Join(n.DataDir, "node.json")); err != nil {
		t.Fatalf("the data dir from the file was not used: %v", err)
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("limit: 3\nhttp_addr: 127.0.0.1:1\n"), 0o600)
	_, stderr, code := proctest.Run(t, rlnodeBin, nil, "serve", "--config", bad)
	if code != 2 || !strings.Contains(stderr, `unknown setting "http_addr"`) {
		t.Fatalf("unknown setting: exit %d, stderr %q; want exit 2 naming it", code, stderr)
	}
}

// A GET with a chunked body that never ends still gets its answer: the
// hit counted, so the client must learn it (the server closes the
// connection instead of waiting for the rest of a body nobody reads).
func TestGetWithAnEndlessBodyIsAnswered(t *testing.T) {
	n := proctest.StartNode(t, rlnodeBin, "solo")
	proctest.WaitReady(t, n, 15*time.Second)
	conn, err := net.Dial("tcp", n.HTTPAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "GET /check/chunky HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a GET whose body never ends: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || !resp.Close {
		t.Fatalf("answer %d, close %v; want 200 and Connection: close", resp.StatusCode, resp.Close)
	}
	if r := proctest.MustGet(t, n.URL()+"/v1/status/chunky"); r.Num("used") != 1 {
		t.Fatalf("the hit did not count once: %s", r.Raw)
	}
}
