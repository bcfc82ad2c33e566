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

// The README's three-node cluster, stopped; n1 loses raft.db (or, on the
// wal log, only wal/) but keeps node.json. It refuses to start (it would
// bootstrap a second cluster, or vote without the entries it once
// acknowledged), then --rejoin-empty brings it back as a new member with
// the cluster's windows.
func TestLostRaftStateRefusesThenRejoinsEmpty(t *testing.T) {
	proctest.Long(t)
	t.Run("raft.db", func(t *testing.T) { testLostRaftState(t, "raft.db") })
	t.Run("wal", func(t *testing.T) {
		if os.Getenv("RLNODE_RAFT_LOG") == "bolt" {
			t.Skip("the nodes run on bolt: no wal/ to lose")
		}
		testLostRaftState(t, "wal")
	})
}

func testLostRaftState(t *testing.T, lost string) {
	nodes := proctest.StartCluster(t, rlnodeBin, 3, "--limit", "3")
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	var resetAt int64
	for i := range 3 {
		r := proctest.MustGet(t, nodes[i].URL()+"/check/alice")
		if r.Status != 200 {
			t.Fatalf("hit %d: %d %s", i, r.Status, r.Raw)
		}
		resetAt = r.Num("resetAt")
	}
	for _, n := range nodes {
		if code := n.Signal(syscall.SIGTERM, 20*time.Second); code != 0 {
			t.Fatalf("stop %s: exit %d", n.ID, code)
		}
	}
	if err := os.RemoveAll(filepath.Join(n1.DataDir, lost)); err != nil {
		t.Fatal(err)
	}

	n1.Restart()
	if code := n1.Wait(20 * time.Second); code != 1 {
		t.Fatalf("n1 without %s: exit %d, want 1 (refuse):\n%s", lost, code, n1.Output())
	}
	if out := n1.Output(); !strings.Contains(out, "no Raft log") || !strings.Contains(out, "--rejoin-empty") {
		t.Fatalf("n1's refusal does not explain the way back:\n%s", out)
	}

	n2.Restart()
	n3.Restart()
	proctest.WaitReady(t, n2, 20*time.Second)
	proctest.WaitReady(t, n3, 20*time.Second)

	args := append(append([]string{}, n1.Args...), "--rejoin-empty", "--join", n2.URL()+","+n3.URL())
	back := &proctest.Node{Proc: proctest.Start(t, rlnodeBin, "n1-rejoined", args...), ID: "n1", HTTPAddr: n1.HTTPAddr, RaftAddr: n1.RaftAddr, DataDir: n1.DataDir}
	proctest.WaitReady(t, back, 20*time.Second)
	proctest.WaitVoters(t, n2, 3, 30*time.Second)
	for _, n := range []*proctest.Node{back, n2, n3} {
		r := proctest.MustGet(t, n.URL()+"/check/alice")
		if r.Status != 429 || r.Num("resetAt") != resetAt {
			t.Fatalf("after n1 rejoined empty, via %s: %d %s; want the spent window (resetAt %d)", n.ID, r.Status, r.Raw, resetAt)
		}
	}
	aside, _ := filepath.Glob(filepath.Join(n1.DataDir, "discarded-*", "node.json"))
	if len(aside) != 1 {
		t.Fatalf("the old identity was not kept aside: %v", aside)
	}
	// The rejoined node is a voter with the cluster's history: its
	// applied index reaches the others'.
	proctest.Poll(t, 15*time.Second, func() error {
		a, err := proctest.Status(back)
		if err != nil {
			return err
		}
		b, err := proctest.Status(n2)
		if err != nil {
			return err
		}
		if a["digest"] != b["digest"] {
			return fmt.Errorf("digests differ: n1 %v, n2 %v", a["digest"], b["digest"])
		}
		return nil
	})
}

// `rlnode join` of a voter that never comes up used to cost a one-node
// cluster its quorum for good. Now the server is a non-voter until it
// catches up, the cluster keeps serving, and the leader removes it after
// --join-catchup-timeout.
func TestJoinOfUnreachableServerLeavesClusterServing(t *testing.T) {
	proctest.Long(t)
	n1 := proctest.StartNode(t, rlnodeBin, "n1", "--join-catchup-timeout", "3s")
	proctest.WaitReady(t, n1, 15*time.Second)
	out, stderr, code := proctest.Run(t, rlnodeBin, nil, "join", "--addr", n1.URL(), "--id", "x",
		"--raft-addr", proctest.FreeAddr(t), "--http-addr", proctest.FreeAddr(t))
	if code != 0 || !strings.Contains(out, "non-voter") {
		t.Fatalf("rlnode join: exit %d %s %s", code, out, stderr)
	}
	found := false
	for _, p := range peers(t, n1.URL()) {
		if p.ID == "x" {
			found = true
			if p.Voter {
				t.Fatalf("an unreachable server was added as a voter: %+v", p)
			}
		}
	}
	if !found {
		t.Fatal("x is not in the configuration after the join")
	}
	if r := proctest.MustGet(t, n1.URL()+"/check/bob"); r.Status != 200 {
		t.Fatalf("hit after the join: %d %s", r.Status, r.Raw)
	}
	proctest.Poll(t, 20*time.Second, func() error {
		for _, p := range peers(t, n1.URL()) {
			if p.ID == "x" {
				return fmt.Errorf("x still a member: %+v", p)
			}
		}
		return nil
	})
	if code := n1.Signal(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("stop: exit %d", code)
	}
	n1.Restart()
	proctest.WaitReady(t, n1, 15*time.Second)
	if r := proctest.MustGet(t, n1.URL()+"/check/bob"); r.Status != 200 || r.Num("remaining") != 8 {
		t.Fatalf("hit after restart: %d %s", r.Status, r.Raw)
	}
}
