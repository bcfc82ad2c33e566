package main

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// A leader removed from the cluster goes quiet: it stops replicating to
// its former peers (no heartbeats logged after it stepped down) and stops
// promptly on SIGTERM.
func TestRemovedLeaderGoesQuiet(t *testing.T) {
	proctest.Long(t)
	nodes := proctest.StartCluster(t, rlnodeBin, 3, "--leave-on-shutdown")
	leader := leaderOf(t, nodes)
	var rest []*proctest.Node
	for _, n := range nodes {
		if n != leader {
			rest = append(rest, n)
		}
	}
	if _, stderr, code := proctest.Run(t, rlnodeBin, nil, "remove", "--addr", leader.URL(), leader.ID); code != 0 {
		t.Fatalf("remove the leader: %s", stderr)
	}
	proctest.WaitVoters(t, rest[0], 2, 15*time.Second)
	// Its former peers carry on without it.
	proctest.WaitReady(t, rest[0], 15*time.Second)
	proctest.Poll(t, 10*time.Second, func() error {
		r, err := proctest.Get(rest[0].URL() + "/check/after")
		if err != nil || r.Status != 200 {
			return fmt.Errorf("hit after the leader's removal: %d %s %v", r.Status, r.Raw, err)
		}
		return nil
	})
	// Kill one former peer: a removed node that still replicated to it
	// would now log failed heartbeats.
	rest[1].Kill()
	time.Sleep(2 * time.Second)
	before := len(leader.Output())
	time.Sleep(4 * time.Second)
	later := leader.Output()[before:]
	for _, l := range strings.Split(later, "\n") {
		if strings.Contains(l, "heartbeat") || strings.Contains(l, "appendEntries") {
			t.Fatalf("the removed leader still talks to its former peers:\n%s", later)
		}
	}
	start := time.Now()
	if code := leader.Signal(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("SIGTERM: exit %d\n%s", code, leader.Output())
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the removed leader took %s to stop on SIGTERM", d)
	}
}
