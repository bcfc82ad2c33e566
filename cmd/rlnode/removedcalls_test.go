package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// A node removed while clients call it tells them "try another node"
// (503, Retry-After) on every public endpoint, never 403: proxies read
// 401/403 from an auth service as "deny this user". Its /readyz fails at
// once, and the removal stays in force with the process running, also for
// a node removed while its own join was still being retried (issue 31).
func TestRemovedNodeAnswersTryAnotherNode(t *testing.T) {
	proctest.Long(t)
	const token = "removal-test-token-0123456789"
	testRemovedNodeAnswers(t, token, func(t *testing.T, id string, extra ...string) *proctest.Node {
		return proctest.StartNode(t, rlnodeBin, id, append([]string{"--cluster-token", token}, extra...)...)
	})
}

// The same over mutual TLS, where the leader refuses a removed node's
// certificate on the internal hop: that refusal once reached callers as
// 403 forbidden.
func TestRemovedNodeAnswersTryAnotherNodeMutualTLS(t *testing.T) {
	proctest.Long(t)
	dir := t.TempDir()
	proctest.TLSInit(t, rlnodeBin, dir, "n1", "n2", "n3", "n4")
	testRemovedNodeAnswers(t, "", func(t *testing.T, id string, extra ...string) *proctest.Node {
		return startTLSNode(t, dir, id, extra...)
	})
}

// callTally counts the statuses one node answered, per endpoint.
type callTally struct {
	mu     sync.Mutex
	counts map[string]int // "endpoint status code"
	bad    []string
}

func (c *callTally) add(endpoint string, r proctest.Response, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		return // a connection error is no answer; the process is checked apart
	}
	code, _ := r.JSON["code"].(string)
	c.counts[fmt.Sprintf("%s %d %s", endpoint, r.Status, code)]++
	ok := r.Status == 200 || r.Status == 429 || r.Status == 503
	if r.Status == 503 && r.Header.Get("Retry-After") == "" {
		ok = false
	}
	if !ok && len(c.bad) < 5 {
		c.bad = append(c.bad, fmt.Sprintf("%s: %d %s (Retry-After %q)", endpoint, r.Status, r.Raw, r.Header.Get("Retry-After")))
	}
}

func (c *callTally) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var lines []string
	for k, v := range c.counts {
		lines = append(lines, fmt.Sprintf("%s x%d", k, v))
	}
	sort.Strings(lines)
	return strings.Join(lines, ", ")
}

// callWhileRemoved calls n on every public endpoint that decides, from a
// few goroutines, until stop is closed.
func callWhileRemoved(n *proctest.Node, token string, stop <-chan struct{}, tally *callTally, wg *sync.WaitGroup) {
	calls := []struct {
		name, method, path string
		body               any
	}{
		{"check", "GET", "/check/removal-%d", nil},
		{"multi", "POST", "/v1/check", map[string]any{"hits": []map[string]any{{"client": "removal-multi"}}}},
		{"forward-auth", "GET", "/v1/auth/default?key=ip", nil},
		{"lease", "POST", "/v1/leases", map[string]any{"policy": "leased", "client": "removal-lease", "holder": "app-1", "want": 1}},
		{"peek", "GET", "/v1/status/removal-peek", nil},
	}
	for _, call := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				path := call.path
				if strings.Contains(path, "%d") {
					path = fmt.Sprintf(path, k%20)
				}
				r, err := n.Do(call.method, path, token, call.body)
				tally.add(call.name, r, err)
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
}

func peerIDs(t *testing.T, n *proctest.Node) []string {
	t.Helper()
	r, err := n.Do("GET", "/v1/cluster/peers", "", nil)
	if err != nil || r.Status != 200 {
		t.Fatalf("peers of %s: %v %d %s", n.ID, err, r.Status, r.Raw)
	}
	var ps []peerJSON
	if err := json.Unmarshal(r.Raw, &ps); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, p := range ps {
		ids = append(ids, p.ID)
	}
	return ids
}

func removeNode(t *testing.T, via *proctest.Node, token, id string) {
	t.Helper()
	r, err := via.Do("POST", "/v1/cluster/remove", token, map[string]any{"id": id})
	if err != nil || r.Status != 200 {
		t.Fatalf("remove %s: %v %d %s", id, err, r.Status, r.Raw)
	}
}

// readyzFailsWithin polls n's /readyz until it fails, and says how long
// that took.
func readyzFails(t *testing.T, n *proctest.Node, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		r, err := n.Do("GET", "/readyz", "", nil)
		if err == nil && r.Status == 503 {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s /readyz still answers %d %s %s after its removal", n.ID, r.Status, r.Raw, time.Since(start))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func testRemovedNodeAnswers(t *testing.T, token string, start func(t *testing.T, id string, extra ...string) *proctest.Node) {
	n1 := start(t, "n1")
	proctest.WaitReady(t, n1, 20*time.Second)
	nodes := []*proctest.Node{n1, start(t, "n2", "--join", n1.URL()), start(t, "n3", "--join", n1.URL())}
	for _, n := range nodes {
		proctest.WaitReady(t, n, 30*time.Second)
	}
	proctest.Poll(t, 30*time.Second, func() error {
		r, err := n1.Do("GET", "/v1/cluster/peers", "", nil)
		if err != nil || strings.Count(string(r.Raw), `"voter":true`) != 3 {
			return fmt.Errorf("want 3 voters: %v %s", err, r.Raw)
		}
		return nil
	})
	if r, err := n1.Do("PUT", "/v1/policies/leased", token, map[string]any{"name": "leased", "algorithm": "fixed_window", "consistency": "leased",
		"limits": []map[string]any{{"limit": 1000, "window": "1m"}}}); err != nil || (r.Status != 200 && r.Status != 201) {
		t.Fatalf("put leased policy: %v %d %s", err, r.Status, r.Raw)
	}
	n3 := nodes[2]
	proctest.Poll(t, 10*time.Second, func() error {
		if r, err := n3.Do("GET", "/v1/policies/leased?stale=true", "", nil); err != nil || r.Status != 200 {
			return fmt.Errorf("the leased policy on n3: %v %d %s", err, r.Status, r.Raw)
		}
		return nil
	})

	// Clients call n3 while it is removed.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	tally := &callTally{counts: map[string]int{}}
	callWhileRemoved(n3, token, stop, tally, &wg)
	time.Sleep(time.Second)
	removeNode(t, n1, token, "n3")
	took := readyzFails(t, n3, 5*time.Second)
	t.Logf("n3 /readyz failed %s after its removal", took)
	if took > time.Second {
		t.Errorf("n3 /readyz failed only %s after its removal, want within a second", took)
	}
	// Admin calls and strong reads say the same.
	for _, call := range []struct {
		method, path string
		body         any
	}{
		{"PUT", "/v1/policies/after-removal", map[string]any{"name": "after-removal", "algorithm": "fixed_window", "limits": []map[string]any{{"limit": 5, "window": "1m"}}}},
		{"GET", "/v1/policies", nil},
		{"POST", "/v1/cluster/transfer-leadership", map[string]any{}},
	} {
		r, err := n3.Do(call.method, call.path, token, call.body)
		if err != nil || r.Status != 503 || r.JSON["code"] != "not_member" || r.Header.Get("Retry-After") == "" {
			t.Errorf("%s %s on the removed node: %v %d %s, want 503 not_member with Retry-After", call.method, call.path, err, r.Status, r.Raw)
		}
	}

	// A node removed right after its join was accepted, while the join
	// is still being retried, stays removed.
	n4 := start(t, "n4", "--join", n1.URL())
	proctest.Poll(t, 30*time.Second, func() error {
		if ids := peerIDs(t, n1); !strings.Contains(strings.Join(ids, ","), "n4") {
			return fmt.Errorf("n4 not added yet: %v", ids)
		}
		return nil
	})
	removeNode(t, n1, token, "n4")

	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()
	t.Logf("n3 answered while removed: %s", tally)
	if len(tally.bad) > 0 {
		t.Errorf("a removed node answered outside 200, 429 and 503 with Retry-After: %s", strings.Join(tally.bad, "; "))
	}
	if !strings.Contains(tally.String(), "503 not_member") {
		t.Errorf("n3 never answered not_member: %s", tally)
	}

	// 30 s later, with both processes running, the removals still hold.
	time.Sleep(30 * time.Second)
	if ids := strings.Join(peerIDs(t, n1), ","); strings.Contains(ids, "n3") || strings.Contains(ids, "n4") {
		t.Fatalf("a removed node is a member again 30 s later: peers %s\nn4's log:\n%s", ids, n4.Output())
	}
	for _, n := range []*proctest.Node{n3, n4} {
		st, err := proctest.Status(n)
		if err != nil {
			t.Fatalf("%s: %v (the process should still run)\n%s", n.ID, err, n.Output())
		}
		if st["membership"] != "removed" {
			t.Errorf("%s status membership %v, want removed: %v", n.ID, st["membership"], st)
		}
		r, _ := n.Do("GET", "/readyz", "", nil)
		if r.Status != 503 || !strings.Contains(string(r.Raw), "removed") {
			t.Errorf("%s /readyz: %d %s, want 503 naming the removal", n.ID, r.Status, r.Raw)
		}
		if c := strings.Count(n.Output(), "answers not_member (503) and is not ready"); c != 1 {
			t.Errorf("%s logged its removal %d times, want once", n.ID, c)
		}
		if m, err := n.Do("GET", "/metrics", token, nil); err != nil || !strings.Contains(string(m.Raw), `rlnode_member{state="removed"} 1`) {
			t.Errorf("%s /metrics lacks rlnode_member{state=\"removed\"} 1: %v", n.ID, err)
		}
	}
	if token == "" {
		return
	}
	out, stderr, code := proctest.Run(t, rlnodeBin, nil, "status", "--addr", n3.URL())
	if code != 0 || !strings.Contains(out, "REMOVED") {
		t.Errorf("rlnode status of the removed node: exit %d\n%s%s", code, out, stderr)
	}
	// An operator adds it back, still running: it is a member and ready
	// again, a voter once caught up.
	if out, stderr, code := proctest.Run(t, rlnodeBin, nil, "join", "--addr", n1.URL(), "--cluster-token", token,
		"--id", "n3", "--raft-addr", n3.RaftAddr, "--http-addr", n3.HTTPAddr); code != 0 {
		t.Fatalf("rlnode join n3 back: exit %d\n%s%s", code, out, stderr)
	}
	proctest.WaitReady(t, n3, 30*time.Second)
	proctest.WaitVoters(t, n1, 3, 30*time.Second)
	if st, err := proctest.Status(n3); err != nil || st["membership"] != "member" {
		t.Fatalf("n3 after rlnode join: %v %v", st, err)
	}
	if r, err := n3.Do("GET", "/check/after-rejoin", "", nil); err != nil || r.Status != 200 {
		t.Fatalf("a check on n3 after it was added back: %v %d %s", err, r.Status, r.Raw)
	}
}
