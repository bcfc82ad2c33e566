package main

import (
	"strings"
	"testing"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// TestCounterSetAndIncThroughThreeProcesses seeds and charges counts
// through a follower with the CLI and the API; the hits that follow see
// them on every node.
func TestCounterSetAndIncThroughThreeProcesses(t *testing.T) {
	nodes := proctest.StartCluster(t, rlnodeBin, 3, "--cluster-token", polToken)
	leader, f := followerOf(t, nodes)
	mustStatus(t, mustDo(t, "PUT", leader.URL()+"/v1/policies/api", polToken, `{"algorithm": "fixed_window", "limits": [{"limit": 5, "window": "1h"}]}`), 200, "set api")

	out, stderr, code := proctest.Run(t, rlnodeBin, polEnv, "counter", "set", "api", "migrated", "4", "--addr", f.URL())
	if code != 0 || !strings.Contains(out, "set api/migrated 4: 1 of 5 remaining") {
		t.Fatalf("counter set: exit %d\n%s%s", code, out, stderr)
	}
	if r := mustStatus(t, proctest.MustGet(t, nodes[2].URL()+"/check/api/migrated"), 200, "hit after set 4"); r.Num("remaining") != 0 {
		t.Fatalf("hit after set 4 of 5: %s", r.Raw)
	}
	mustStatus(t, proctest.MustGet(t, f.URL()+"/check/api/migrated"), 429, "6th hit")

	// Above the limit: refused, nothing changed.
	if _, stderr, code := proctest.Run(t, rlnodeBin, polEnv, "counter", "set", "api", "other", "6", "--addr", f.URL()); code != 1 || !strings.Contains(stderr, "allows at most 5") {
		t.Fatalf("counter set 6 of 5: exit %d %s", code, stderr)
	}
	mustStatus(t, proctest.MustGet(t, f.URL()+"/check/api/other"), 200, "other after the refused set")

	// inc counts past the limit: the key is refused afterwards.
	out, stderr, code = proctest.Run(t, rlnodeBin, polEnv, "counter", "inc", "api", "batch-job", "9", "--addr", f.URL(), "--json")
	if code != 0 || !strings.Contains(out, `"remaining": 0`) {
		t.Fatalf("counter inc: exit %d\n%s%s", code, out, stderr)
	}
	mustStatus(t, proctest.MustGet(t, leader.URL()+"/check/api/batch-job"), 429, "hit after inc 9 of 5")

	// The API: bad bodies are 400s, the token is needed, unknown policies 404.
	for body, want := range map[string]int{`{}`: 400, `{"set": 1, "inc": 1}`: 400, `{"inc": 0}`: 400, `{"set": -1}`: 400, `{"set": 1, "x": 1}`: 400} {
		mustStatus(t, mustDo(t, "POST", f.URL()+"/v1/windows/api/c", polToken, body), want, "POST "+body)
	}
	mustStatus(t, mustDo(t, "POST", f.URL()+"/v1/windows/api/c", "", `{"set": 1}`), 401, "without the token")
	mustStatus(t, mustDo(t, "POST", f.URL()+"/v1/windows/nope/c", polToken, `{"inc": 1}`), 404, "unknown policy")
	// set 0 forgets the key.
	mustStatus(t, mustDo(t, "POST", f.URL()+"/v1/windows/api/batch-job", polToken, `{"set": 0}`), 200, "set 0")
	if r := mustStatus(t, proctest.MustGet(t, f.URL()+"/check/api/batch-job"), 200, "hit after set 0"); r.Num("remaining") != 4 {
		t.Fatalf("hit after set 0: %s", r.Raw)
	}
}
