package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
	"github.com/rlnode/rlnode/fsm"
)

// `rlnode version` and `--version` print one version line; every command's
// --help exits 0 and names its positional arguments; usage errors carry no
// doubled prefix.
func TestVersionHelpAndUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, stderr, code := proctest.Run(t, rlnodeBin, nil, args...)
		if code != 0 || !strings.HasPrefix(out, "rlnode ") || !strings.Contains(out, "go1.") || !strings.Contains(out, fmt.Sprintf("(log format %d, reads %d-%d)", fsm.CurrentFormat, fsm.OldestFormat, fsm.CurrentFormat)) {
			t.Errorf("%v: exit %d, %q %q", args, code, out, stderr)
		}
	}
	want := map[string]string{
		"serve": "no positional arguments", "peers": "no positional arguments", "status": "no positional arguments",
		"join": "no positional arguments", "remove": "rlnode remove [flags] ID", "transfer-leadership": "[ID]",
		"snapshot": "no positional arguments", "health": "no positional arguments", "bench": "no positional arguments",
		"version": "no arguments", "migrate-log": "no positional arguments", "tls": "rlnode tls init", "tls init": "--out DIR --nodes",
		"backup": "--out FILE", "restore": "rlnode restore [flags] FILE", "recover": "rlnode recover [flags] --data-dir D --peers FILE",
	}
	for cmd, w := range want {
		out, stderr, code := proctest.Run(t, rlnodeBin, nil, append(strings.Fields(cmd), "--help")...)
		if code != 0 || !strings.Contains(out+stderr, w) {
			t.Errorf("rlnode %s --help: exit %d, want 0 and %q in:\n%s%s", cmd, code, w, out, stderr)
		}
	}
	for _, args := range [][]string{{"remove"}, {"transfer-leadership", "a", "b"}, {"bench", "x"}, {"join", "--id", "x"},
		{"backup"}, {"restore"}, {"recover"}, {"policy", "import-envoy"}} {
		_, stderr, code := proctest.Run(t, rlnodeBin, nil, args...)
		if code != 2 || strings.Contains(stderr, "usage: usage:") || strings.Contains(stderr, args[0]+": "+args[0]+":") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and no repeated prefix", args, code, stderr)
		}
	}
}

// A query parameter given twice is a 400, not "the first one wins"; too
// large headers get a 431 problem document.
func TestAmbiguousQueryAndLargeHeaders(t *testing.T) {
	n := proctest.StartNode(t, rlnodeBin, "q")
	proctest.WaitReady(t, n, 15*time.Second)
	r := proctest.MustGet(t, n.URL()+"/check/alice?cost=5&cost=1")
	if r.Status != 400 || r.JSON["code"] != "invalid_request" || !strings.Contains(fmt.Sprint(r.JSON["detail"]), "cost") {
		t.Fatalf("cost=5&cost=1: %d %s", r.Status, r.Raw)
	}
	if r := proctest.MustGet(t, n.URL()+"/check/alice?cost=5"); r.Status != 200 || r.Num("remaining") != 5 {
		t.Fatalf("the refused request counted, or cost=5 fails: %d %s", r.Status, r.Raw)
	}
	if r := proctest.MustGet(t, n.URL()+"/v1/status/alice?stale=1&stale=0"); r.Status != 400 {
		t.Fatalf("stale given twice: %d %s", r.Status, r.Raw)
	}
	// 100 KB of headers: over rlnode's 64 KB, under net/http's own limit.
	req, _ := http.NewRequest("GET", n.URL()+"/check/bob", nil)
	for i := range 100 {
		req.Header.Set(fmt.Sprintf("X-Pad-%d", i), strings.Repeat("p", 1000))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p map[string]any
	json.NewDecoder(resp.Body).Decode(&p)
	if resp.StatusCode != 431 || resp.Header.Get("Content-Type") != "application/problem+json" || p["status"] != float64(431) {
		t.Fatalf("100 KB of headers: %d %s %v, want a 431 problem document", resp.StatusCode, resp.Header.Get("Content-Type"), p)
	}
	// Past net/http's own limit the answer is its plain-text 431 (the README
	// says so); the node keeps serving.
	c, err := net.Dial("tcp", n.HTTPAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /check/bob HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n", strings.Repeat("b", 300<<10))
	line, _ := bufio.NewReader(c).ReadString('\n')
	if !strings.Contains(line, "431") {
		t.Fatalf("300 KB header: %q, want 431", line)
	}
	proctest.WaitReady(t, n, 5*time.Second)
}
