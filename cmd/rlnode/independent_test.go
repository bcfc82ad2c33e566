package main

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// TestIndependentCheck: POST /v1/check with "independent": true decides
// up to 1,000 hits each on its own through a follower: one refused takes
// nothing from the others, bad hits carry their own error, and one key
// of 500 allows exactly 500 of 1,000.
func TestIndependentCheck(t *testing.T) {
	nodes := proctest.StartCluster(t, rlnodeBin, 3, "--limit", "500", "--window", "1h")
	leader := leaderOf(t, nodes)
	follower := nodes[0]
	if follower == leader {
		follower = nodes[1]
	}
	type result struct {
		Allowed   bool   `json:"allowed"`
		Remaining int64  `json:"remaining"`
		Policy    string `json:"policy"`
		Client    string `json:"client"`
		Error     *struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	ask := func(hits []map[string]any) []result {
		t.Helper()
		r, err := proctest.Do("POST", follower.URL()+"/v1/check", "", map[string]any{"independent": true, "hits": hits})
		if err != nil || r.Status != 200 {
			t.Fatalf("independent check: %v %d %s", err, r.Status, r.Raw)
		}
		var body struct {
			Independent bool     `json:"independent"`
			Results     []result `json:"results"`
		}
		if err := json.Unmarshal(r.Raw, &body); err != nil || !body.Independent || len(body.Results) != len(hits) {
			t.Fatalf("body %s: %v", r.Raw, err)
		}
		return body.Results
	}
	got := ask([]map[string]any{
		{"client": "a", "cost": 400}, {"client": "a", "cost": 200}, {"client": "a", "cost": 100},
		{"policy": "nope", "client": "a"}, {"client": ""}, {"client": "a", "cost": 501}, {"client": "b"},
	})
	want := []struct {
		allowed   bool
		remaining int64
		code      string
	}{{true, 100, ""}, {false, 100, ""}, {true, 0, ""}, {false, 0, "unknown_policy"}, {false, 0, "invalid_request"}, {false, 0, "cost_exceeds_limit"}, {true, 499, ""}}
	for i, w := range want {
		g := got[i]
		code := ""
		if g.Error != nil {
			code = g.Error.Code
		}
		if g.Allowed != w.allowed || code != w.code || (code == "" && g.Remaining != w.remaining) {
			t.Fatalf("hit %d: %+v (error %q), want %+v", i, g, code, w)
		}
	}

	hits := make([]map[string]any, 1000)
	for i := range hits {
		hits[i] = map[string]any{"client": "many"}
	}
	start := time.Now()
	allowed := 0
	for _, r := range ask(hits) {
		if r.Allowed {
			allowed++
		}
	}
	t.Logf("1,000 independent hits through a follower in %s", time.Since(start))
	if allowed != 500 {
		t.Fatalf("%d of 1,000 hits allowed on a key of 500", allowed)
	}
	r, err := proctest.Do("POST", follower.URL()+"/v1/check", "", map[string]any{"independent": true, "hits": make([]map[string]any, 1001)})
	if err != nil || r.Status != 400 {
		t.Fatal(fmt.Sprint("1,001 hits: ", err, r.Status, string(r.Raw)))
	}
}
