package main

import (
	"fmt"
	"os"
	"path/filepath"
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

// The attack of issue 17, item 4: three voters, one down, and a node
// restarted with its clock 5 s ahead. Right after its restart it has no
// readings of its peers, and missing readings used to count for nothing,
// so with fast election timers it stood, won, and stamped hits 5 s ahead:
// cluster time ran ahead for good and open windows lapsed early. Now a
// node must have a majority of voters (itself included) agreeing with its
// clock: the skewed node never leads, the healthy one cannot confirm its
// clock either (one peer down, one disagreeing), so hits fail until the
// down voter returns; then the cluster serves with time as it was.
func TestSkewedRestartWithVoterDownCannotLead(t *testing.T) {
	proctest.Long(t)
	const window = 30 * time.Second
	base := []string{"--limit", "100", "--window", window.String()}
	n1 := proctest.StartNode(t, rlnodeBin, "n1", base...)
	proctest.WaitReady(t, n1, 15*time.Second)
	n2 := proctest.StartNode(t, rlnodeBin, "n2", append([]string{"--join", n1.URL()}, base...)...)
	n3 := proctest.StartNode(t, rlnodeBin, "n3", append([]string{"--join", n1.URL()}, base...)...)
	proctest.WaitVoters(t, n1, 3, 30*time.Second)
	for _, n := range []*proctest.Node{n1, n2, n3} {
		proctest.WaitReady(t, n, 20*time.Second)
	}
	if r := proctest.MustGet(t, n1.URL()+"/check/before"); r.Status != 200 {
		t.Fatalf("hit before the faults: %d %s", r.Status, r.Raw)
	}

	n3.Kill() // one voter down
	// n2 comes back 5 s ahead with election timers far shorter than n1's,
	// so if anyone stands first, it is n2.
	n2.Kill()
	n2Args := n2.Args
	n2.Args = append(append([]string(nil), n2Args...), "--debug-clock-offset", "5s",
		"--raft-heartbeat-timeout", "300ms", "--raft-election-timeout", "300ms", "--raft-lease-timeout", "300ms")
	ledBefore := strings.Count(n2.Output(), "entering leader state")
	n2.Restart()
	n1.Kill()
	n1.Args = append(n1.Args, "--raft-heartbeat-timeout", "3s", "--raft-election-timeout", "3s")
	n1.Restart()

	// For a while (many of n2's election timeouts), n2 never leads and no
	// hit is served.
	proctest.Poll(t, 20*time.Second, func() error {
		if st, err := proctest.Status(n2); err != nil || st["clockSkewed"] != true {
			return fmt.Errorf("n2 does not refuse to lead yet: %v %v", st["clockSkewed"], err)
		}
		return nil
	})
	for deadline := time.Now().Add(8 * time.Second); time.Now().Before(deadline); {
		if st, err := proctest.Status(n2); err == nil && st["state"] == "Leader" {
			t.Fatalf("the skewed node leads (term %v) while a voter is down", st["term"])
		}
		if r, err := n1.Do("GET", "/check/during", "", nil); err == nil && r.Status == 200 {
			t.Fatalf("a hit was served by %s while no majority confirms any clock: %s", r.Header.Get("X-Rlnode-Served-By"), r.Raw)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if led := strings.Count(n2.Output(), "entering leader state"); led != ledBefore {
		t.Fatalf("the skewed node entered leader state after its restart")
	}
	if !strings.Contains(n1.Output(), "cannot confirm its clock with a majority") {
		t.Errorf("n1 does not say why it will not lead")
	}

	// The down voter returns: n1 and n3 agree, one of them leads, and
	// cluster time is real time (a window opened now ends a window from
	// now, not 5 s later).
	n3.Restart()
	var r proctest.Response
	proctest.Poll(t, 30*time.Second, func() error {
		var err error
		start := time.Now()
		if r, err = n1.Do("GET", "/check/after", "", nil); err != nil || r.Status != 200 {
			return fmt.Errorf("hit after n3 returned: %v %d %s", err, r.Status, r.Raw)
		}
		d := time.UnixMilli(r.Num("resetAt")).Sub(start)
		if d < window-3*time.Second || d > window+3*time.Second {
			t.Fatalf("a window opened now resets in %s, want about %s: cluster time is off", d, window)
		}
		return nil
	})
	if by := r.Header.Get("X-Rlnode-Served-By"); by == "n2" {
		t.Fatalf("the skewed node served the hit")
	}
	if st, err := proctest.Status(n2); err != nil || st["state"] == "Leader" {
		t.Fatalf("n2: %v %v", st["state"], err)
	}
}

// A whole cluster restarted before its first snapshot, on data dirs
// without the members' address cache (written by versions before it):
// the state machine holds no member addresses until a leader exists, and
// no node may lead before it has read a majority of clocks. The nodes
// started with --join read the clocks behind those addresses, so the
// cluster elects a leader and serves again.
func TestWholeClusterRestartWithoutAddressCache(t *testing.T) {
	proctest.Long(t)
	nodes := proctest.StartCluster(t, rlnodeBin, 3)
	if r := proctest.MustGet(t, nodes[1].URL()+"/check/carol"); r.Status != 200 {
		t.Fatalf("hit: %d %s", r.Status, r.Raw)
	}
	for _, n := range nodes {
		n.Kill()
	}
	for _, n := range nodes {
		if err := os.Remove(filepath.Join(n.DataDir, "peer-http.json")); err != nil {
			t.Fatalf("%s: %v (the cache this test removes is not where it expects)", n.ID, err)
		}
		n.Restart()
	}
	proctest.Poll(t, 30*time.Second, func() error {
		r, err := nodes[0].Do("GET", "/check/carol", "", nil)
		if err != nil || r.Status != 200 || r.Num("remaining") != 8 {
			return fmt.Errorf("hit after the restart: %v %d %s", err, r.Status, r.Raw)
		}
		return nil
	})
}
