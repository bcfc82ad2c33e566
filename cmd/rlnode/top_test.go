package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// topOf asks a node for GET /v1/top with the token.
func topOf(t *testing.T, n *proctest.Node, query string) (answer struct {
	By       string `json:"by"`
	Accuracy string `json:"accuracy"`
	Nodes    []struct {
		ID string `json:"id"`
		OK bool   `json:"ok"`
	} `json:"nodes"`
	Policies []struct {
		Policy  string `json:"policy"`
		Allowed uint64 `json:"allowed"`
		Refused uint64 `json:"refused"`
		Exact   bool   `json:"exact"`
		Keys    []struct {
			Key   string `json:"key"`
			Count uint64 `json:"count"`
			Min   uint64 `json:"min"`
		} `json:"keys"`
	} `json:"policies"`
}) {
	t.Helper()
	r, err := n.Do("GET", "/v1/top?"+query, polToken, nil)
	if err != nil || r.Status != 200 {
		t.Fatalf("GET /v1/top?%s: %v %d %s", query, err, r.Status, r.Raw)
	}
	if err := json.Unmarshal(r.Raw, &answer); err != nil {
		t.Fatal(err)
	}
	return answer
}

// TestTopKeysAcrossThreeProcesses: each node counts the hits clients sent
// it; GET /v1/top on any node merges all three over the internal path, and
// rlnode top --once prints the cluster, the rates and the top clients.
func TestTopKeysAcrossThreeProcesses(t *testing.T) {
	nodes := proctest.StartCluster(t, rlnodeBin, 3, "--cluster-token", polToken)
	leader, _ := followerOf(t, nodes)
	mustStatus(t, mustDo(t, "PUT", leader.URL()+"/v1/policies/login", polToken, `{"algorithm": "fixed_window", "limits": [{"limit": 3, "window": "1h"}]}`), 200, "set login")
	// mallory: 4 hits on each node, 3 allowed in all, 9 refused; alice: 1.
	for _, n := range nodes {
		for i := 0; i < 4; i++ {
			proctest.MustGet(t, n.URL()+"/check/login/mallory")
		}
	}
	proctest.MustGet(t, nodes[1].URL()+"/check/login/alice")

	asked := nodes[2]
	proctest.Poll(t, 20*time.Second, func() error {
		a := topOf(t, asked, "policy=login&by=refused&n=5")
		if len(a.Policies) != 1 || a.Policies[0].Refused != 9 || a.Policies[0].Allowed != 4 {
			return fmt.Errorf("top: %+v; want login with 9 refused, 4 allowed", a)
		}
		return nil
	})
	a := topOf(t, asked, "policy=login&by=refused&n=5")
	p := a.Policies[0]
	if len(p.Keys) != 1 || p.Keys[0].Key != "mallory" || p.Keys[0].Count != 9 || p.Keys[0].Min != 9 || !p.Exact || len(a.Nodes) != 3 || a.Accuracy == "" {
		t.Fatalf("top refused of login: %+v", a)
	}
	for _, nd := range a.Nodes {
		if !nd.OK {
			t.Fatalf("node %s not merged: %+v", nd.ID, a.Nodes)
		}
	}
	al := topOf(t, asked, "policy=login&by=allowed&n=1").Policies[0]
	if len(al.Keys) != 1 || al.Keys[0].Key != "mallory" || al.Keys[0].Count != 3 {
		t.Fatalf("top allowed of login, n=1: %+v", al)
	}

	// Client ids are personal data: the token is required; bad input is a 400.
	if r, _ := asked.Do("GET", "/v1/top", "", nil); r.Status != 401 {
		t.Fatalf("GET /v1/top without the token: %d %s", r.Status, r.Raw)
	}
	for _, q := range []string{"by=everything", "n=0", "n=101", "policy=%00"} {
		if r, _ := asked.Do("GET", "/v1/top?"+q, polToken, nil); r.Status != 400 {
			t.Fatalf("GET /v1/top?%s: %d %s; want 400", q, r.Status, r.Raw)
		}
	}

	out := topCLI(t, asked, "--once", "--policy", "login")
	for _, want := range []string{"cluster: leader " + leader.ID, "3/3 members reachable", "top refused clients of login", "mallory", "counts: exact", "LEASES HELD"} {
		if !strings.Contains(out, want) {
			t.Fatalf("rlnode top --once printed:\n%s\nwant %q", out, want)
		}
	}
	if _, stderr, code := proctest.Run(t, rlnodeBin, nil, "top", "--once", "--addr", asked.URL()); code != 1 || !strings.Contains(stderr, "401") {
		t.Fatalf("rlnode top without the token: exit %d %s", code, stderr)
	}
	// Live: it redraws until q is typed.
	live := exec.Command(rlnodeBin, "top", "--interval", "200ms", "--addr", asked.URL())
	live.Env = append(os.Environ(), polEnv...)
	stdin, _ := live.StdinPipe()
	screen := &lockedBuffer{}
	live.Stdout = screen
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	proctest.Poll(t, 20*time.Second, func() error {
		if n := strings.Count(screen.String(), "cluster: leader"); n < 2 {
			return fmt.Errorf("%d frames drawn", n)
		}
		return nil
	})
	stdin.Write([]byte("q"))
	done := make(chan error, 1)
	go func() { done <- live.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("rlnode top after q: %v", err)
		}
	case <-time.After(20 * time.Second):
		live.Process.Kill()
		t.Fatal("rlnode top did not quit on q")
	}

	// A dead member is named; the others' counts still merge.
	var dead *proctest.Node
	for _, n := range nodes {
		if n != asked && n != leader {
			dead = n
		}
	}
	dead.Kill()
	out = topCLI(t, asked, "--once")
	for _, want := range []string{"2/3 members reachable", dead.ID + ` +unreachable +connection refused`, "without " + dead.ID + ` \(unreachable\)`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Fatalf("rlnode top --once with %s down printed:\n%s\nwant %q", dead.ID, out, want)
		}
	}
}

func topCLI(t *testing.T, n *proctest.Node, args ...string) string {
	t.Helper()
	out, stderr, code := proctest.Run(t, rlnodeBin, polEnv, append(append([]string{"top"}, args...), "--addr", n.URL())...)
	if code != 0 {
		t.Fatalf("rlnode top %v: exit %d\n%s%s", args, code, out, stderr)
	}
	return out
}

// lockedBuffer is a bytes.Buffer a process writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
