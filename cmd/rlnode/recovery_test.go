package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// waitConverged waits until every node reports the same digest at the
// same applied index.
func waitConverged(t *testing.T, nodes []*proctest.Node) string {
	t.Helper()
	var digest string
	proctest.Poll(t, 20*time.Second, func() error {
		digest = ""
		var idx any
		for _, n := range nodes {
			st, err := proctest.Status(n)
			if err != nil {
				return err
			}
			d, _ := st["digest"].(string)
			if digest != "" && (d != digest || st["digestIndex"] != idx) {
				return fmt.Errorf("%s: digest %s at %v, another node %s at %v", n.ID, d, st["digestIndex"], digest, idx)
			}
			digest, idx = d, st["digestIndex"]
		}
		return nil
	})
	return digest
}

// The runbook "lost two of three nodes": n2 and n3 are gone for good with
// their data dirs; `rlnode recover` makes the survivor a cluster of one
// with every window it had, and new members join it.
func TestRecoverFromLostMajority(t *testing.T) {
	proctest.Long(t)
	nodes := proctest.StartCluster(t, rlnodeBin, 3, "--limit", "3")
	n1 := nodes[0]
	var resetAt int64
	for _, n := range nodes {
		r := proctest.MustGet(t, n.URL()+"/check/alice")
		if r.Status != 200 {
			t.Fatalf("hit: %d %s", r.Status, r.Raw)
		}
		resetAt = r.Num("resetAt")
	}
	proctest.MustGet(t, nodes[1].URL()+"/check/bob")
	waitConverged(t, nodes)
	for _, n := range nodes[1:] {
		n.Kill()
		if err := os.RemoveAll(n.DataDir); err != nil {
			t.Fatal(err)
		}
	}
	if code := n1.Signal(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("stop n1: exit %d", code)
	}

	peersFile := filepath.Join(t.TempDir(), "peers.json")
	b, _ := json.Marshal([]map[string]string{{"id": "n1", "raftAddr": n1.RaftAddr}})
	if err := os.WriteFile(peersFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := proctest.Run(t, rlnodeBin, nil, "recover", "--data-dir", n1.DataDir, "--peers", filepath.Join(t.TempDir(), "missing.json")); code != 2 {
		t.Fatalf("recover with a missing peers file: exit %d %s", code, stderr)
	}
	out, stderr, code := proctest.Run(t, rlnodeBin, nil, "recover", "--data-dir", n1.DataDir, "--peers", peersFile)
	if code != 0 || !strings.Contains(out, "recovered") {
		t.Fatalf("rlnode recover: exit %d\n%s%s", code, out, stderr)
	}
	n1.Restart()
	proctest.WaitReady(t, n1, 20*time.Second)
	if r := proctest.MustGet(t, n1.URL()+"/check/alice"); r.Status != 429 || r.Num("resetAt") != resetAt {
		t.Fatalf("after recover: alice %d %s; want her spent window (resetAt %d)", r.Status, r.Raw, resetAt)
	}
	if r := proctest.MustGet(t, n1.URL()+"/check/bob"); r.Status != 200 || r.Num("remaining") != 1 {
		t.Fatalf("after recover: bob %d %s; want his second hit of three", r.Status, r.Raw)
	}

	// New, empty members take the lost ones' places.
	fresh := []*proctest.Node{n1}
	for _, id := range []string{"n4", "n5"} {
		fresh = append(fresh, proctest.StartNode(t, rlnodeBin, id, "--limit", "3", "--join", n1.URL()))
	}
	proctest.WaitVoters(t, n1, 3, 30*time.Second)
	for _, n := range fresh {
		proctest.WaitReady(t, n, 20*time.Second)
		if r := proctest.MustGet(t, n.URL()+"/check/alice"); r.Status != 429 {
			t.Fatalf("via %s: alice %d %s", n.ID, r.Status, r.Raw)
		}
	}
}

// startOn starts a node on old's addresses with a new, empty data dir.
func startOn(t *testing.T, old *proctest.Node, extra ...string) *proctest.Node {
	n := &proctest.Node{ID: old.ID, HTTPAddr: old.HTTPAddr, RaftAddr: old.RaftAddr, DataDir: filepath.Join(t.TempDir(), old.ID)}
	args := append([]string{"serve", "--id", n.ID, "--http-addr", n.HTTPAddr, "--raft-addr", n.RaftAddr, "--data-dir", n.DataDir}, extra...)
	n.Proc = proctest.Start(t, rlnodeBin, n.ID+"-new", args...)
	return n
}

// `rlnode backup` asked of a follower streams the leader's consistent
// state through it; the whole cluster is then lost, a new empty one is
// built on the same addresses and `rlnode restore`, asked of a follower
// too, brings back every window: the same digest on every node.
func TestBackupAndRestoreIntoNewCluster(t *testing.T) {
	proctest.Long(t)
	a := proctest.StartCluster(t, rlnodeBin, 3, "--limit", "4")
	for i := range 20 {
		if r := proctest.MustGet(t, fmt.Sprintf("%s/check/client-%d", a[i%3].URL(), i%7)); r.Status != 200 {
			t.Fatalf("hit: %d %s", r.Status, r.Raw)
		}
	}
	digest := waitConverged(t, a)
	file := filepath.Join(t.TempDir(), "backup.bin")
	out, stderr, code := proctest.Run(t, rlnodeBin, nil, "backup", "--addr", follower(t, a).URL(), "--out", file)
	if code != 0 || !strings.Contains(out, "backup of 7 windows") {
		t.Fatalf("rlnode backup: exit %d\n%s%s", code, out, stderr)
	}
	for _, n := range a {
		n.Kill()
	}

	b := []*proctest.Node{startOn(t, a[0], "--limit", "4")}
	proctest.WaitReady(t, b[0], 20*time.Second)
	for _, n := range a[1:] {
		b = append(b, startOn(t, n, "--limit", "4", "--join", b[0].URL()))
	}
	proctest.WaitVoters(t, b[0], 3, 30*time.Second)
	out, stderr, code = proctest.Run(t, rlnodeBin, nil, "restore", "--addr", follower(t, b).URL(), file)
	if code != 0 || !strings.Contains(out, "restored 7 windows") {
		t.Fatalf("rlnode restore: exit %d\n%s%s", code, out, stderr)
	}
	if got := waitConverged(t, b); got != digest {
		t.Fatalf("restored cluster's digest %s, backed-up cluster's %s", got, digest)
	}
	for i := range 7 {
		r := proctest.MustGet(t, fmt.Sprintf("%s/v1/status/client-%d", b[i%3].URL(), i))
		hits := int64(20 / 7)
		if i < 20%7 {
			hits++
		}
		if r.Status != 200 || r.Num("remaining") != 4-hits {
			t.Fatalf("client-%d after restore: %d %s; want remaining %d", i, r.Status, r.Raw, 4-hits)
		}
	}
	_, stderr, code = proctest.Run(t, rlnodeBin, nil, "restore", "--addr", b[0].URL(), file)
	if code != 1 || !strings.Contains(stderr, "not empty") {
		t.Fatalf("restore into a cluster with windows: exit %d %s; want a refusal", code, stderr)
	}
}

// follower is a node of nodes that does not lead.
func follower(t *testing.T, nodes []*proctest.Node) *proctest.Node {
	t.Helper()
	leader := leaderOf(t, nodes)
	for _, n := range nodes {
		if n != leader {
			return n
		}
	}
	t.Fatal("no follower")
	return nil
}

// A restore body that is not a backup (random bytes, a real backup cut
// short) is the caller's mistake: 400 invalid_backup, a detail that names
// no server path, and the state untouched. The whole backup still restores.
func TestRestoreRefusesMalformedBackup(t *testing.T) {
	n := proctest.StartNode(t, rlnodeBin, "n1", "--limit", "4")
	proctest.WaitReady(t, n, 15*time.Second)
	for i := range 5 {
		if r := proctest.MustGet(t, fmt.Sprintf("%s/check/client-%d", n.URL(), i)); r.Status != 200 {
			t.Fatalf("hit: %d %s", r.Status, r.Raw)
		}
	}
	file := filepath.Join(t.TempDir(), "backup.bin")
	if out, stderr, code := proctest.Run(t, rlnodeBin, nil, "backup", "--addr", n.URL(), "--out", file); code != 0 {
		t.Fatalf("rlnode backup: exit %d\n%s%s", code, out, stderr)
	}
	whole, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	digest := waitConverged(t, []*proctest.Node{n})
	random := make([]byte, 4096)
	for i := range random {
		random[i] = byte(i*7919 + i>>3) // deterministic noise, no backup header
	}
	for name, body := range map[string][]byte{"random bytes": random, "truncated backup": whole[:len(whole)/2], "backup missing its CRC": whole[:len(whole)-1]} {
		r, err := proctest.DoRaw("POST", n.URL()+"/v1/cluster/restore?force=true", "", body)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		detail, _ := r.JSON["detail"].(string)
		if r.Status != 400 || r.JSON["code"] != "invalid_backup" || !strings.Contains(detail, "not a valid rlnode backup") {
			t.Errorf("%s: %d %s; want 400 invalid_backup", name, r.Status, r.Raw)
		}
		if strings.Contains(detail, n.DataDir) || strings.Contains(detail, os.TempDir()) || strings.Contains(detail, ".tmp") {
			t.Errorf("%s: the detail names a server path: %s", name, detail)
		}
	}
	if got := waitConverged(t, []*proctest.Node{n}); got != digest {
		t.Fatalf("refused restores changed the state: digest %s, was %s", got, digest)
	}
	if r, err := proctest.DoRaw("POST", n.URL()+"/v1/cluster/restore?force=true", "", whole); err != nil || r.Status != 200 {
		t.Fatalf("restore of the whole backup: %v %d %s", err, r.Status, r.Raw)
	}
}
