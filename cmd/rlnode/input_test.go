package main

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// authKey asks forward-auth for a key=ip hit with the given headers and
// returns the key the node counted.
func authKey(t *testing.T, n *proctest.Node, headers map[string]string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", n.URL()+"/v1/auth/default?key=ip", nil)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("forward-auth with %v: %d", headers, resp.StatusCode)
	}
	return resp.Header.Get("X-Rlnode-Key")
}

// Forward-auth keys on X-Real-IP when every X-Forwarded-For hop is a
// trusted proxy, and drops IPv6 zone ids.
func TestForwardAuthRealIPAndZones(t *testing.T) {
	n := proctest.StartNode(t, rlnodeBin, "fa", "--trusted-proxies", "127.0.0.1/32,10.0.0.0/8")
	proctest.WaitReady(t, n, 15*time.Second)
	for _, c := range []struct {
		headers map[string]string
		want    string
	}{
		{map[string]string{"X-Forwarded-For": "10.1.2.3", "X-Real-Ip": "203.0.113.7"}, "203.0.113.7"},
		{map[string]string{"X-Forwarded-For": "198.51.100.9, 10.1.2.3", "X-Real-Ip": "203.0.113.7"}, "198.51.100.9"},
		{map[string]string{"X-Forwarded-For": "10.1.2.3"}, "10.1.2.3"},
		{map[string]string{"X-Forwarded-For": "2001:db8::1%eth0"}, "2001:db8::1"},
		{map[string]string{"X-Real-Ip": "unknown"}, "127.0.0.1"}, // not an address: the peer
		{map[string]string{"X-Real-Ip": "fe80::1%eth1"}, "fe80::1"},
	} {
		if got := authKey(t, n, c.headers); got != c.want {
			t.Errorf("%v: key %q, want %q", c.headers, got, c.want)
		}
	}
}

// POST /v1/check refuses a key given twice and a field named in the wrong
// case; every route refuses query parameters it does not read.
func TestStrictCheckBodyAndQuery(t *testing.T) {
	n := proctest.StartNode(t, rlnodeBin, "strict", "--limit", "5")
	proctest.WaitReady(t, n, 15*time.Second)
	for body, field := range map[string]string{
		`{"hits":[{"client":"a","cost":1,"cost":1000}]}`: `"hits[0].cost" is given twice`,
		`{"hits":[{"client":"a","Cost":5}]}`:             `"hits[0].Cost": names are case-sensitive; write "cost"`,
		`{"Hits":[{"client":"a"}]}`:                      `"Hits": names are case-sensitive; write "hits"`,
	} {
		r := mustDo(t, "POST", n.URL()+"/v1/check", "", body)
		if r.Status != 400 || !strings.Contains(fmt.Sprint(r.JSON["detail"]), field) {
			t.Errorf("%s: %d %s; want 400 naming %s", body, r.Status, r.Raw, field)
		}
	}
	for path, want := range map[string]string{
		"/check/a?COST=9":              `"COST" is unknown (names are case-sensitive): did you mean "cost"?`,
		"/check/default/a?costs=2":     `"costs" is unknown: this endpoint takes cost`,
		"/v1/status?verbose=1":         `"verbose" is unknown: this endpoint takes none`,
		"/v1/policies?Stale=true":      `did you mean "stale"?`,
		"/v1/status/default/a?x=1":     `"x" is unknown`,
		"/readyz?full=1":               `"full" is unknown`,
		"/v1/policies/default?a=b":     `"a" is unknown`,
		"/v1/top?bogus=1":              `"bogus" is unknown: this endpoint takes by, n, policy`,
		"/v1/cluster/members?x=1":      `"x" is unknown`,
		"/v1/top?by=allowed&n=3":       "",
		"/check/default/a?cost=2":      "",
		"/v1/policies?stale=true":      "",
		"/v1/status/default/a?stale=1": "",
	} {
		r := proctest.MustGet(t, n.URL()+path)
		if want == "" {
			if r.Status != 200 {
				t.Errorf("%s: %d %s", path, r.Status, r.Raw)
			}
			continue
		}
		if r.Status != 400 || !strings.Contains(fmt.Sprint(r.JSON["detail"]), want) {
			t.Errorf("%s: %d %s; want 400 with %s", path, r.Status, r.Raw, want)
		}
	}
	// None of the refused hits counted: only the cost=2 one did.
	if r := proctest.MustGet(t, n.URL()+"/v1/status/default/a"); r.Num("remaining") != 3 {
		t.Fatalf("after refused hits: %s", r.Raw)
	}
}

// restore without --force refuses a cluster whose policy table was
// changed even when it holds no windows, as it does for windows.
func TestRestoreRefusesCustomPolicies(t *testing.T) {
	src := proctest.StartNode(t, rlnodeBin, "src")
	proctest.WaitReady(t, src, 15*time.Second)
	file := filepath.Join(t.TempDir(), "backup.bin")
	if out, stderr, code := proctest.Run(t, rlnodeBin, nil, "backup", "--addr", src.URL(), "--out", file); code != 0 {
		t.Fatalf("rlnode backup: exit %d\n%s%s", code, out, stderr)
	}
	dst := proctest.StartNode(t, rlnodeBin, "dst")
	proctest.WaitReady(t, dst, 15*time.Second)
	// A new cluster's own seed is no reason to refuse.
	if out, stderr, code := proctest.Run(t, rlnodeBin, nil, "restore", "--addr", dst.URL(), file); code != 0 {
		t.Fatalf("restore into a new cluster: exit %d\n%s%s", code, out, stderr)
	}
	mustDo(t, "PUT", dst.URL()+"/v1/policies/login", "", `{"algorithm":"fixed_window","limits":[{"limit":3,"window":"1m"}]}`)
	_, stderr, code := proctest.Run(t, rlnodeBin, nil, "restore", "--addr", dst.URL(), file)
	if code != 1 || !strings.Contains(stderr, "--force") || !strings.Contains(stderr, "login") {
		t.Fatalf("restore over a custom policy without --force: exit %d %s", code, stderr)
	}
	if r := proctest.MustGet(t, dst.URL()+"/v1/policies/login"); r.Status != 200 {
		t.Fatalf("the refused restore replaced the table: %d %s", r.Status, r.Raw)
	}
	if out, stderr, code := proctest.Run(t, rlnodeBin, nil, "restore", "--force", "--addr", dst.URL(), file); code != 0 {
		t.Fatalf("restore --force: exit %d\n%s%s", code, out, stderr)
	}
	if r := proctest.MustGet(t, dst.URL()+"/v1/policies/login"); r.Status != 404 {
		t.Fatalf("after restore --force: %d %s", r.Status, r.Raw)
	}
}
