package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

const polToken = "p0licy"

var polEnv = []string{"RLNODE_CLUSTER_TOKEN=" + polToken}

// policyCLI runs `rlnode policy ARGS --addr URL` with the token and fails
// the test unless it exits 0. A read (list, get) that met a leader
// election is asked again, as its user would on the 503: a read is
// linearizable through the leader, and a loaded machine sees elections.
// Writes are never rerun: a 503 may leave their outcome unknown.
func policyCLI(t *testing.T, n *proctest.Node, args ...string) string {
	t.Helper()
	read := len(args) > 0 && (args[0] == "list" || args[0] == "get")
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, stderr, code := proctest.Run(t, rlnodeBin, polEnv, append(append([]string{"policy"}, args...), "--addr", n.URL())...)
		if code == 0 {
			return out
		}
		if !read || !strings.Contains(stderr, "HTTP 503") || time.Now().After(deadline) {
			t.Fatalf("rlnode policy %v: exit %d\n%s%s", args, code, out, stderr)
		}
		t.Logf("rlnode policy %v met a leader change, asking again: %s", args, strings.TrimSpace(stderr))
		time.Sleep(200 * time.Millisecond)
	}
}

func followerOf(t *testing.T, nodes []*proctest.Node) (leader, follower *proctest.Node) {
	t.Helper()
	leader = leaderOf(t, nodes)
	for _, n := range nodes {
		if n != leader {
			return leader, n
		}
	}
	t.Fatal("no follower")
	return nil, nil
}

func mustStatus(t *testing.T, r proctest.Response, status int, what string) proctest.Response {
	t.Helper()
	if r.Status != status {
		t.Fatalf("%s: %d %s; want %d", what, r.Status, r.Raw, status)
	}
	return r
}

func lastLogIndex(t *testing.T, n *proctest.Node) int64 {
	index, _ := logPosition(t, n)
	return index
}

// logPosition is n's last log index and its term.
func logPosition(t *testing.T, n *proctest.Node) (index, term int64) {
	t.Helper()
	st, err := proctest.Status(n)
	if err != nil {
		t.Fatal(err)
	}
	return int64(st["lastLogIndex"].(float64)), int64(st["term"].(float64))
}

// entriesWrittenBy returns how many entries the leader's log grew by
// while op ran. An election meanwhile writes entries that are not op's
// (the new leader's no-op and its read barrier), so when the term moved
// the count says nothing: undo puts back what op changed (nil when op can
// simply run again) and op runs again, in up to five tries.
func entriesWrittenBy(t *testing.T, nodes []*proctest.Node, undo, op func()) int64 {
	t.Helper()
	for try := 1; ; try++ {
		leader := leaderOf(t, nodes)
		before, term := logPosition(t, leader)
		op()
		after, termAfter := logPosition(t, leader)
		if termAfter == term {
			return after - before
		}
		if try == 5 {
			t.Fatalf("the term moved during each of %d tries (last %d to %d): no quiet moment to count log entries in", try, term, termAfter)
		}
		t.Logf("an election (term %d to %d) wrote entries while counting; counting again", term, termAfter)
		if undo != nil {
			undo()
		}
	}
}

const clusterPolicies = `
policies:
  - name: default
    algorithm: fixed_window
    limits: [{limit: 10, window: 60s}]
  - name: login
    algorithm: fixed_window
    limits: [{limit: 3, window: 1h}]
  - name: api
    algorithm: fixed_window
    limits:
      - {limit: 2, window: 1h}
      - {limit: 5, window: 24h}
  - name: user
    algorithm: sliding_window
    limits: [{limit: 5, window: 1h}]
  - name: org
    algorithm: token_bucket
    limits: [{limit: 1, window: 24h, burst: 2}]
`

// TestPoliciesThroughThreeProcesses drives the policy API and CLI on a real
// three-node cluster, always through a follower so every write and hit is
// forwarded to the leader.
func TestPoliciesThroughThreeProcesses(t *testing.T) {
	proctest.Long(t)
	nodes := proctest.StartCluster(t, rlnodeBin, 3, "--cluster-token", polToken)
	leader, f := followerOf(t, nodes)
	file := filepath.Join(t.TempDir(), "policies.yaml")
	os.WriteFile(file, []byte(clusterPolicies), 0o644)

	// apply --dry-run changes nothing; apply makes the table equal the file.
	if out := policyCLI(t, f, "apply", "-f", file, "--dry-run"); !strings.Contains(out, "would be added login") {
		t.Fatalf("dry run printed:\n%s", out)
	}
	if out := policyCLI(t, f, "list"); strings.Contains(out, "login") {
		t.Fatalf("--dry-run changed the table:\n%s", out)
	}
	out := policyCLI(t, f, "apply", "-f", file)
	for _, want := range []string{"added login", "added api", "added user", "added org"} {
		if !strings.Contains(out, want) {
			t.Fatalf("apply printed:\n%s\nwant %q", out, want)
		}
	}
	if out := policyCLI(t, f, "apply", "-f", file); !strings.Contains(out, "no changes") {
		t.Fatalf("second apply printed:\n%s", out)
	}
	// An empty (or truncated to nothing) file would delete every policy,
	// default included: refused, the table untouched.
	empty := filepath.Join(t.TempDir(), "empty.yaml")
	os.WriteFile(empty, nil, 0o644)
	if _, stderr, code := proctest.Run(t, rlnodeBin, polEnv, "policy", "apply", "-f", empty, "--addr", f.URL()); code != 2 || !strings.Contains(stderr, "defines no policies") {
		t.Fatalf("apply of an empty file: exit %d %s; want exit 2", code, stderr)
	}
	if out := policyCLI(t, f, "list"); !strings.Contains(out, "default") || !strings.Contains(out, "login") {
		t.Fatalf("an empty file changed the table:\n%s", out)
	}
	for _, n := range nodes { // every node sees the table
		proctest.Poll(t, 5*time.Second, func() error {
			if r := proctest.MustGet(t, n.URL()+"/v1/policies/org"); r.Status != 200 {
				return fmt.Errorf("%s: %d %s", n.ID, r.Status, r.Raw)
			}
			return nil
		})
	}

	t.Run("named policy and definite answers through a follower", func(t *testing.T) {
		for i := int64(2); i >= 0; i-- {
			r := mustStatus(t, proctest.MustGet(t, f.URL()+"/check/login/u1"), 200, "login hit")
			if r.Num("remaining") != i || r.Header.Get("X-Rlnode-Served-By") != leader.ID {
				t.Fatalf("login hit: %s (served by %s)", r.Raw, r.Header.Get("X-Rlnode-Served-By"))
			}
		}
		r := mustStatus(t, proctest.MustGet(t, f.URL()+"/check/login/u1"), 429, "spent login")
		if r.JSON["code"] != "quota_exceeded" || r.Header.Get("Retry-After") == "" {
			t.Fatalf("spent login: %s", r.Raw)
		}
		if r := mustStatus(t, proctest.MustGet(t, f.URL()+"/check/nope/u1"), 404, "unknown policy"); r.JSON["code"] != "unknown_policy" {
			t.Fatalf("unknown policy: %s", r.Raw)
		}
		r = mustStatus(t, proctest.MustGet(t, f.URL()+"/check/login/u2?cost=4"), 422, "cost above limit")
		if r.JSON["code"] != "cost_exceeds_limit" || r.Header.Get("Retry-After") != "" || string(mustRaw(r.JSON["retryAfterMs"])) != "null" {
			t.Fatalf("cost above limit: %s (Retry-After %q)", r.Raw, r.Header.Get("Retry-After"))
		}
		mustStatus(t, proctest.MustGet(t, f.URL()+"/check/login/u2?cost=x"), 400, "bad cost")
		// /check/:client is still the default policy.
		if r := mustStatus(t, proctest.MustGet(t, f.URL()+"/check/u1"), 200, "default"); r.JSON["policy"] != "default" || r.Num("remaining") != 9 {
			t.Fatalf("default: %s", r.Raw)
		}
	})

	t.Run("several limits", func(t *testing.T) {
		r := mustStatus(t, proctest.MustGet(t, f.URL()+"/check/api/k"), 200, "api hit")
		if got := r.Header.Get("RateLimit-Policy"); got != `"api-1h";q=2;w=3600, "api-1d";q=5;w=86400` {
			t.Fatalf("RateLimit-Policy %q", got)
		}
		limits, _ := r.JSON["limits"].([]any)
		if len(limits) != 2 || r.Num("limit") != 2 || r.Num("remaining") != 1 {
			t.Fatalf("api body: %s", r.Raw)
		}
		mustStatus(t, proctest.MustGet(t, f.URL()+"/check/api/k"), 200, "second api hit")
		r = mustStatus(t, proctest.MustGet(t, f.URL()+"/check/api/k"), 429, "third api hit")
		if p := mustStatus(t, proctest.MustGet(t, f.URL()+"/v1/status/api/k"), 200, "peek"); p.Num("used") != 2 {
			t.Fatalf("a refused hit counted in the day limit: %s", p.Raw)
		}
	})

	t.Run("sliding window and token bucket", func(t *testing.T) {
		const hour = int64(3_600_000)
		for i := int64(4); i >= 0; i-- {
			r := mustStatus(t, proctest.MustGet(t, f.URL()+"/check/user/slide"), 200, "sliding hit")
			l := r.JSON["limits"].([]any)[0].(map[string]any)
			start := int64(l["windowStart"].(float64))
			if r.Num("remaining") != i || start%hour != 0 || r.Num("resetAt") != start+2*hour {
				t.Fatalf("sliding hit: %s; want %d left in an hour-aligned window reset 2h after its start", r.Raw, i)
			}
		}
		r := mustStatus(t, proctest.MustGet(t, f.URL()+"/check/user/slide"), 429, "spent sliding window")
		if retry := r.Num("retryAfterMs"); retry < 1 || retry > 2*hour {
			t.Fatalf("spent sliding window: %s", r.Raw)
		}
		r = mustStatus(t, proctest.MustGet(t, f.URL()+"/check/org/bucket?cost=2"), 200, "bucket of 2")
		if l := r.JSON["limits"].([]any)[0].(map[string]any); r.Num("remaining") != 0 || r.Num("limit") != 2 || l["windowStart"] != nil {
			t.Fatalf("bucket of 2: %s; want 0 left of a capacity of 2, no windowStart", r.Raw)
		}
		r = mustStatus(t, proctest.MustGet(t, f.URL()+"/check/org/bucket"), 429, "empty bucket")
		if retry := r.Num("retryAfterMs"); retry < 23*hour || retry > 24*hour {
			t.Fatalf("empty bucket: %s; want about 24h until one token is back", r.Raw)
		}
		mustStatus(t, proctest.MustGet(t, f.URL()+"/check/org/bucket2?cost=3"), 422, "cost above the bucket")
		p := mustStatus(t, proctest.MustGet(t, f.URL()+"/v1/status/org/bucket"), 200, "bucket peek")
		if p.Num("remaining") != 0 || p.Num("resetAt")-p.Num("appliedNow") < 47*hour {
			t.Fatalf("bucket peek: %s; want empty and full again in about 48h", p.Raw)
		}
	})

	t.Run("POST /v1/check is all or nothing", func(t *testing.T) {
		body := `{"hits":[{"policy":"user","client":"u9"},{"policy":"org","client":"o7","cost":2}]}`
		r := mustStatus(t, mustDo(t, "POST", f.URL()+"/v1/check", "", body), 200, "first multi-check")
		if r.JSON["allowed"] != true {
			t.Fatalf("first multi-check: %s", r.Raw)
		}
		// The org is spent now: the next check refuses and spends nothing
		// of the user's budget.
		r = mustStatus(t, mustDo(t, "POST", f.URL()+"/v1/check", "", body), 429, "second multi-check")
		res, _ := r.JSON["results"].([]any)
		if len(res) != 2 || res[0].(map[string]any)["allowed"] != true || res[1].(map[string]any)["allowed"] != false {
			t.Fatalf("second multi-check results: %s", r.Raw)
		}
		if p := mustStatus(t, proctest.MustGet(t, f.URL()+"/v1/status/user/u9"), 200, "user peek"); p.Num("remaining") != 4 {
			t.Fatalf("the refused check spent the user's budget: %s", p.Raw)
		}
		mustStatus(t, mustDo(t, "POST", f.URL()+"/v1/check", "", `{"hits":[{"policy":"user","client":"u9"},{"policy":"gone","client":"x"}]}`), 404, "multi-check with an unknown policy")
		mustStatus(t, mustDo(t, "POST", f.URL()+"/v1/check", "", `{"hits":[]}`), 400, "empty multi-check")
		many := `{"hits":[` + strings.Repeat(`{"policy":"user","client":"m"},`, 64) + `{"policy":"user","client":"m"}]}`
		mustStatus(t, mustDo(t, "POST", f.URL()+"/v1/check", "", many), 400, "65 hits")
	})

	t.Run("changing and deleting a policy", func(t *testing.T) {
		mustStatus(t, proctest.MustGet(t, f.URL()+"/check/login/c"), 200, "login c")
		first := proctest.MustGet(t, f.URL()+"/v1/status/login/c").Num("windowStart")
		// Lowered below what c used: refuses until the window has room.
		policyCLI(t, f, "set", "login", "--limit", "1", "--window", "1h")
		mustStatus(t, proctest.MustGet(t, f.URL()+"/check/login/c"), 429, "after lowering")
		// Raised: the open window keeps its start and its count.
		if out := policyCLI(t, f, "set", "login", "--algorithm", "fixed_window", "--limit", "4", "--window", "1h"); !strings.HasPrefix(out, "changed login") {
			t.Fatalf("set printed %q", out)
		}
		r := mustStatus(t, proctest.MustGet(t, f.URL()+"/check/login/c"), 200, "after raising")
		if r.Num("remaining") != 2 || proctest.MustGet(t, f.URL()+"/v1/status/login/c").Num("windowStart") != first {
			t.Fatalf("after raising: %s; want 2 left in the window opened at %d", r.Raw, first)
		}
		// Reset one key through the log (needs the token).
		mustStatus(t, mustDo(t, "DELETE", f.URL()+"/v1/windows/login/c", "", ""), 401, "reset without token")
		mustStatus(t, mustDo(t, "DELETE", f.URL()+"/v1/windows/login/c", polToken, ""), 200, "reset")
		if r := proctest.MustGet(t, f.URL()+"/check/login/c"); r.Num("remaining") != 3 {
			t.Fatalf("after reset: %s", r.Raw)
		}
		// Delete: checks and reads answer unknown_policy; re-created, it is fresh.
		if out := policyCLI(t, f, "delete", "login"); !strings.Contains(out, "deleted login") {
			t.Fatalf("delete printed %q", out)
		}
		mustStatus(t, proctest.MustGet(t, f.URL()+"/check/login/u1"), 404, "check of a deleted policy")
		mustStatus(t, proctest.MustGet(t, f.URL()+"/v1/status/login/u1"), 404, "peek of a deleted policy")
		policyCLI(t, f, "set", "login", "--limit", "3", "--window", "1h")
		if r := mustStatus(t, proctest.MustGet(t, f.URL()+"/check/login/u1"), 200, "re-created"); r.Num("remaining") != 2 {
			t.Fatalf("re-created policy kept the old window: %s", r.Raw)
		}
	})

	t.Run("bad policies get 400 naming the field and write nothing", func(t *testing.T) {
		// Only the DELETE of an unknown policy reaches the log.
		if n := entriesWrittenBy(t, nodes, nil, func() { badPolicyInput(t, f) }); n != 1 {
			t.Fatalf("bad input wrote %d log entries, want 1 (the delete)", n)
		}
	})

	t.Run("restart keeps policies from snapshot and log", func(t *testing.T) {
		mustStatus(t, mustDo(t, "POST", leader.URL()+"/v1/cluster/snapshot", polToken, ""), 200, "snapshot")
		policyCLI(t, f, "set", "late", "--algorithm", "token_bucket", "--limit", "10,100", "--window", "1s,1h", "--burst", "20,100")
		want := policyCLI(t, f, "list", "--json")
		for _, n := range nodes {
			n.Kill()
		}
		for _, n := range nodes {
			n.Restart()
		}
		for _, n := range nodes {
			proctest.WaitReady(t, n, 20*time.Second)
		}
		for _, n := range nodes {
			if got := policyCLI(t, n, "list", "--json"); got != want {
				t.Fatalf("%s after restart lists\n%s\nwant\n%s", n.ID, got, want)
			}
		}
		if r := proctest.MustGet(t, nodes[0].URL()+"/check/api/k"); r.Status != 429 {
			t.Fatalf("api/k after restart: %d %s; want its spent window", r.Status, r.Raw)
		}
	})
}

// serve --policies seeds the table of a new cluster; --limit/--window still
// seed default beside it.
func TestServeSeedsPoliciesFromAFile(t *testing.T) {
	proctest.Long(t)
	file := filepath.Join(t.TempDir(), "p.json")
	os.WriteFile(file, []byte(`[{"name":"login","algorithm":"fixed_window","limits":[{"limit":2,"window":"1m"}]}]`), 0o644)
	n := proctest.StartNode(t, rlnodeBin, "n1", "--policies", file, "--limit", "7")
	proctest.WaitReady(t, n, 15*time.Second)
	out, _, _ := proctest.Run(t, rlnodeBin, nil, "policy", "list", "--json", "--addr", n.URL())
	var table struct {
		Policies []struct {
			Name   string `json:"name"`
			Limits []struct {
				Limit int64 `json:"limit"`
			} `json:"limits"`
		} `json:"policies"`
	}
	if err := json.Unmarshal([]byte(out), &table); err != nil || len(table.Policies) != 2 || table.Policies[0].Name != "default" ||
		table.Policies[0].Limits[0].Limit != 7 || table.Policies[1].Name != "login" {
		t.Fatalf("seeded table: %s (%v)", out, err)
	}
	// A restart with other flags changes nothing, and says so.
	n.Kill()
	n.Args = append(n.Args, "--limit", "99")
	n.Restart()
	proctest.WaitReady(t, n, 15*time.Second)
	if r := proctest.MustGet(t, n.URL()+"/check/a"); r.Num("limit") != 7 {
		t.Fatalf("after a restart with --limit 99: %s", r.Raw)
	}
	proctest.Poll(t, 5*time.Second, func() error {
		if !strings.Contains(n.Output(), "differ from the replicated default policy") {
			return fmt.Errorf("no log line about the differing flags")
		}
		return nil
	})
	// A bad file is a usage error naming the path.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("- name: x\n  algorithm: fixed_window\n  limits: [{limit: 1, window: 1s, wndow: 2s}]\n"), 0o644)
	_, stderr, code := proctest.Run(t, rlnodeBin, nil, "serve", "--policies", bad, "--data-dir", t.TempDir())
	if code != 2 || !strings.Contains(stderr, "[0].limits[0].wndow") {
		t.Fatalf("serve with a bad policy file: exit %d %s", code, stderr)
	}
}

func mustDo(t *testing.T, method, url, token, body string) proctest.Response {
	t.Helper()
	var b []byte
	if body != "" {
		b = []byte(body)
	}
	r, err := proctest.DoRaw(method, url, token, b)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return r
}

func mustRaw(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// badPolicyInput sends policy writes that must be refused with a 400 (or
// 401, 404) naming what is wrong, through f.
func badPolicyInput(t *testing.T, f *proctest.Node) {
	t.Helper()
	for _, tc := range []struct{ body, field string }{
		{`{"algorithm":"fixed_window","limits":[{"limit":0,"window":"1s"}]}`, "limits[0].limit"},
		{`{"algorithm":"fixed_window","limits":[{"limit":1,"window":"0s"}]}`, "limits[0].window"},
		{`{"algorithm":"fixed_window","limits":[{"limit":1,"window":"9000h"}]}`, "limits[0].window"},
		{`{"algorithm":"token_bucket","limits":[{"limit":1,"window":"1s","burst":0}]}`, "limits[0].burst"},
		{`{"algorithm":"token_bucket","limits":[{"limit":1,"window":"1s","burst":-2}]}`, "limits[0].burst"},
		{`{"algorithm":"fixed_window","limits":[{"limit":1,"window":"1s"},{"limit":2,"window":"1000ms"}]}`, "limits[1].window"},
		{`{"algorithm":"fixed_window","limits":[` + strings.Repeat(`{"limit":1,"window":"1s"},`, 8) + `{"limit":1,"window":"2s"}]}`, "limits"},
		{`{"algorithm":"leaky_bucket","limits":[{"limit":1,"window":"1s"}]}`, "algorithm"},
		{`{"algorithm":"fixed_window","limits":[{"limit":1,"window":"1s","colour":"red"}]}`, "limits[0].colour"},
		{`{"algorithm":"fixed_window","limits":[]}`, "limits"},
		{`{"algorithm":"fixed_window","limits":[{"limit":1,"window":"soon"}]}`, "limits[0].window"},
		{`{"algorithm":`, "JSON"},
	} {
		r := mustDo(t, "PUT", f.URL()+"/v1/policies/bad", polToken, tc.body)
		detail, _ := r.JSON["detail"].(string)
		if r.Status != 400 || !strings.Contains(detail, tc.field) {
			t.Errorf("PUT %s: %d %s; want 400 naming %s", tc.body, r.Status, r.Raw, tc.field)
		}
	}
	mustStatus(t, mustDo(t, "PUT", f.URL()+"/v1/policies/bad%2Fname", polToken, `{"algorithm":"fixed_window","limits":[{"limit":1,"window":"1s"}]}`), 400, "bad name")
	mustStatus(t, mustDo(t, "PUT", f.URL()+"/v1/policies/ok", "", `{"algorithm":"fixed_window","limits":[{"limit":1,"window":"1s"}]}`), 401, "PUT without token")
	mustStatus(t, mustDo(t, "DELETE", f.URL()+"/v1/policies/nope", polToken, ""), 404, "delete of an unknown policy")
}
