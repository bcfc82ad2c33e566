package main

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// One voter of three runs 30 s ahead (--debug-clock-offset). It notices,
// says so in its status and metrics, is refused as a transfer target, and
// never leads while leaders are killed around it; windows keep their
// real-time length because only healthy clocks stamp hits.
func TestSkewedNodeNeverLeads(t *testing.T) {
	proctest.Long(t)
	n1 := proctest.StartNode(t, rlnodeBin, "n1", "--limit", "3", "--window", "20s")
	proctest.WaitReady(t, n1, 15*time.Second)
	n2 := proctest.StartNode(t, rlnodeBin, "n2", "--limit", "3", "--window", "20s", "--join", n1.URL())
	n3 := proctest.StartNode(t, rlnodeBin, "n3", "--limit", "3", "--window", "20s", "--join", n1.URL(), "--debug-clock-offset", "30s")
	nodes := []*proctest.Node{n1, n2, n3}
	proctest.WaitVoters(t, n1, 3, 30*time.Second)
	proctest.Poll(t, 15*time.Second, func() error {
		st, err := proctest.Status(n3)
		if err != nil {
			return err
		}
		if st["clockSkewed"] != true {
			return fmt.Errorf("n3 does not see its clock as skewed: %v ms", st["clockSkewMs"])
		}
		return nil
	})
	if m := proctest.MustGet(t, n3.URL()+"/metrics"); !strings.Contains(string(m.Raw), "rlnode_clock_skewed 1") {
		t.Fatalf("n3's metrics do not show the skew")
	}
	if _, stderr, code := proctest.Run(t, rlnodeBin, nil, "transfer-leadership", "--addr", n1.URL(), "n3"); code == 0 || !strings.Contains(stderr, "409") || !strings.Contains(stderr, "n3's clock is") {
		t.Fatalf("transfer to the skewed node: exit %d %s; want the leader's 409 naming n3's clock", code, stderr)
	}

	for round := range 3 {
		leader := leaderOf(t, nodes)
		if leader == n3 {
			t.Fatalf("round %d: the skewed node leads", round)
		}
		start := time.Now()
		r := proctest.MustGet(t, n3.URL()+fmt.Sprintf("/check/c%d", round))
		if r.Status != 200 || r.Header.Get("X-Rlnode-Served-By") == "n3" {
			t.Fatalf("hit via n3: %d %s served by %s", r.Status, r.Raw, r.Header.Get("X-Rlnode-Served-By"))
		}
		// The window ends 20 s after now by a healthy clock, not 30 s
		// before that (or at once) as a skewed stamp would have it.
		if d := time.UnixMilli(r.Num("resetAt")).Sub(start); d < 18*time.Second || d > 22*time.Second {
			t.Fatalf("window resets %s after the hit; want about 20s", d)
		}
		leader.Kill()
		// Whoever leads next, it is never n3.
		deadline := time.Now().Add(4 * time.Second)
		for time.Now().Before(deadline) {
			if st, err := proctest.Status(n3); err == nil && st["state"] == "Leader" {
				t.Fatalf("round %d: the skewed node became leader after %s was killed", round, leader.ID)
			}
			time.Sleep(50 * time.Millisecond)
		}
		leader.Restart()
		proctest.WaitReady(t, leader, 20*time.Second)
	}
	if code := n3.Signal(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("stop n3: exit %d", code)
	}
}
