package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// bootstrapRounds is how often TestBootstrapExpectAllAtOnce starts a fresh
// cluster: 20 (the count) with the long tests
// (RLNODE_LONG_TESTS=1), else 3; RLNODE_BOOTSTRAP_ROUNDS
// overrides it.
func bootstrapRounds() int {
	if v, err := strconv.Atoi(os.Getenv("RLNODE_BOOTSTRAP_ROUNDS")); err == nil && v > 0 {
		return v
	}
	if !proctest.LongEnabled() {
		return 3
	}
	return 20
}

// Three nodes with the same --join list and --bootstrap-expect 3, started
// at the same moment, form exactly one cluster, round after round: every
// node's configuration holds all three as voters from the start and all
// agree on one leader.
func TestBootstrapExpectAllAtOnce(t *testing.T) {
	for round := range bootstrapRounds() {
		ok := t.Run(fmt.Sprintf("round%d", round+1), func(t *testing.T) {
			nodes := proctest.StartSymmetric(t, rlnodeBin, 3, "--limit", "5")
			for _, n := range nodes {
				proctest.WaitReady(t, n, 30*time.Second)
			}
			proctest.Poll(t, 20*time.Second, func() error { return oneCluster(t, nodes) })
			// The three were voters from the first configuration on: no
			// member that had not been reached yet was removed and
			// re-added (which left the new cluster with one voter).
			for _, n := range nodes {
				if out := n.Output(); strings.Contains(out, "replacing member") {
					t.Fatalf("%s replaced a member of the cluster it had just bootstrapped:\n%s", n.ID, out)
				}
			}
			if r := proctest.MustGet(t, nodes[2].URL()+"/check/alice"); r.Status != 200 || r.Num("remaining") != 4 {
				t.Fatalf("first hit: %d %s", r.Status, r.Raw)
			}
			if r := proctest.MustGet(t, nodes[0].URL()+"/check/alice"); r.Status != 200 || r.Num("remaining") != 3 {
				t.Fatalf("second hit through another node: %d %s (two clusters would count apart)", r.Status, r.Raw)
			}
		})
		if !ok {
			return
		}
	}
}

// oneCluster checks that every node sees the same three voters and the
// same leader.
func oneCluster(t *testing.T, nodes []*proctest.Node) error {
	var leader string
	for _, n := range nodes {
		st, err := proctest.Status(n)
		if err != nil {
			return err
		}
		l, _ := st["leaderId"].(string)
		if l == "" || (leader != "" && l != leader) {
			return fmt.Errorf("%s sees leader %q, another node %q", n.ID, l, leader)
		}
		leader = l
		var ids []string
		for _, p := range peers(t, n.URL()) {
			if !p.Voter {
				return fmt.Errorf("%s: %s is not a voter yet", n.ID, p.ID)
			}
			ids = append(ids, p.ID)
		}
		slices.Sort(ids)
		if !slices.Equal(ids, []string{"n1", "n2", "n3"}) {
			return fmt.Errorf("%s's configuration is %v, want n1 n2 n3", n.ID, ids)
		}
	}
	return nil
}

// A symmetric cluster restarted with the claimer's volume lost (no
// node.json, no Raft state): it must not bootstrap again; it finds the
// others' cluster, rejoins as a new member and gets the windows back.
func TestBootstrapExpectRestartWithLostVolume(t *testing.T) {
	proctest.Long(t)
	nodes := proctest.StartSymmetric(t, rlnodeBin, 3, "--limit", "2")
	for _, n := range nodes {
		proctest.WaitReady(t, n, 30*time.Second)
	}
	proctest.Poll(t, 20*time.Second, func() error { return oneCluster(t, nodes) })
	for range 2 {
		if r := proctest.MustGet(t, nodes[1].URL()+"/check/bob"); r.Status != 200 {
			t.Fatalf("hit: %d %s", r.Status, r.Raw)
		}
	}
	for _, n := range nodes {
		n.Kill()
	}
	if err := os.RemoveAll(nodes[0].DataDir); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		n.Restart()
	}
	for _, n := range nodes {
		proctest.WaitReady(t, n, 30*time.Second)
	}
	proctest.Poll(t, 30*time.Second, func() error { return oneCluster(t, nodes) })
	if r := proctest.MustGet(t, nodes[0].URL()+"/check/bob"); r.Status != 429 {
		t.Fatalf("the node whose volume was lost serves %d %s; want bob's spent window", r.Status, r.Raw)
	}
}
