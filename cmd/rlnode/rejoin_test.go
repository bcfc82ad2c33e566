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

// Issue 41: a node that joins empty installs the leader's latest snapshot,
// taken before the leader itself was added back, so the configuration it
// restores lacks its own leader. Over mutual TLS its Raft guard then
// refused every new connection from that leader: it never received the
// entries that named the leader, and stayed out for good (the soak ended
// with 4 voters of 5). Here: n3 is removed and re-added after the
// snapshot S, leads, and n2 rejoins empty and installs S; it is killed the
// moment S is on its disk (before the entries after S reach it) and
// restarted, so every connection from the leader is new. It must become a
// voter again and the cluster whole.
func TestRejoinFromSnapshotOlderThanTheLeader(t *testing.T) {
	proctest.Long(t)
	dir := t.TempDir()
	proctest.TLSInit(t, rlnodeBin, dir, "n1", "n2", "n3")
	// No automatic snapshot; few trailing entries, so a joining node
	// must install the snapshot rather than replay the log (on bolt: the
	// wal drops entries behind a snapshot only a segment at a time).
	flags := []string{"--snapshot-threshold", "1000000", "--trailing-logs", "1", "--raft-log", "bolt"}
	n1 := startTLSNode(t, dir, "n1", flags...)
	proctest.WaitReady(t, n1, 15*time.Second)
	n2 := startTLSNode(t, dir, "n2", append([]string{"--join", n1.URL()}, flags...)...)
	n3 := startTLSNode(t, dir, "n3", append([]string{"--join", n1.URL()}, flags...)...)
	waitTLSVoters(t, n1, []string{"n1", "n2", "n3"}, 30*time.Second)

	// n3 removed; windows written; snapshot S on n1: its configuration
	// is {n1, n2}.
	tlsAdmin(t, dir, "remove", "--addr", n1.HTTPAddr, "n3")
	n3.Kill()
	spendMany(t, n1, 2000)
	tlsAdmin(t, dir, "snapshot", "--addr", n1.HTTPAddr)

	// n3 back, empty: it installs S (its own latest snapshot from now on)
	// and then leads.
	n3 = startTLSNodeIn(t, dir, "n3", t.TempDir(), n3.RaftAddr, n3.HTTPAddr, append([]string{"--join", n1.URL()}, flags...)...)
	waitTLSVoters(t, n1, []string{"n1", "n2", "n3"}, 30*time.Second)
	tlsAdmin(t, dir, "transfer-leadership", "--addr", n1.HTTPAddr, "n3")
	proctest.Poll(t, 15*time.Second, func() error {
		if st, err := proctest.Status(n3); err != nil || st["state"] != "Leader" {
			return fmt.Errorf("n3 does not lead yet: %v %v", st["state"], err)
		}
		return nil
	})

	// n2 removed and back empty: the leader n3 sends it S, which lacks
	// n3. Killed as soon as S is on its disk, restarted on that data dir.
	tlsAdmin(t, dir, "remove", "--addr", n3.HTTPAddr, "n2")
	n2.Kill()
	data := t.TempDir()
	joinArgs := append([]string{"--join", n3.URL() + "," + n1.URL()}, flags...)
	n2 = startTLSNodeIn(t, dir, "n2", data, n2.RaftAddr, n2.HTTPAddr, joinArgs...)
	waitSnapshotOnDisk(t, data, 30*time.Second)
	n2.Kill()
	n2.Restart()

	waitTLSVoters(t, n3, []string{"n1", "n2", "n3"}, 60*time.Second)
	proctest.WaitReady(t, n2, 30*time.Second)
	proctest.Poll(t, 10*time.Second, func() error {
		if st, err := proctest.Status(n2); err != nil || st["membership"] != "member" {
			jf, _ := os.ReadFile(filepath.Join(data, "join.json"))
			return fmt.Errorf("n2 after its restart: membership %v (%v), want member: %v %s", st["membership"], err, st, jf)
		}
		return nil
	})
	if r, err := n2.Do("GET", "/check/after-rejoin", "", nil); err != nil || r.Status != 200 {
		t.Fatalf("a hit through n2: %v %d %s", err, r.Status, r.Raw)
	}
}

// startTLSNodeIn starts node id over mutual TLS on a given data dir and
// addresses (a node restarted empty keeps its addresses).
func startTLSNodeIn(t *testing.T, dir, id, dataDir, raftAddr, httpAddr string, extra ...string) *proctest.Node {
	t.Helper()
	n := &proctest.Node{ID: id, HTTPAddr: httpAddr, RaftAddr: raftAddr, DataDir: dataDir}
	args := append([]string{"serve", "--id", id, "--http-addr", httpAddr, "--raft-addr", raftAddr, "--data-dir", dataDir}, proctest.TLSFlags(dir, id)...)
	n.Proc = proctest.Start(t, rlnodeBin, id+"-"+filepath.Base(dataDir), append(args, extra...)...)
	n.TLS = proctest.ClientTLS(t, dir, true)
	return n
}

// tlsAdmin runs an admin command with client.pem.
func tlsAdmin(t *testing.T, dir string, args ...string) string {
	t.Helper()
	env := []string{"RLNODE_TLS_CERT=" + filepath.Join(dir, "client.pem"), "RLNODE_TLS_KEY=" + filepath.Join(dir, "client-key.pem"),
		"RLNODE_TLS_CA=" + filepath.Join(dir, "ca.pem")}
	var out string
	proctest.Poll(t, 20*time.Second, func() error {
		o, stderr, code := proctest.Run(t, rlnodeBin, env, args...)
		if code != 0 {
			return fmt.Errorf("rlnode %s: exit %d: %s%s", strings.Join(args, " "), code, o, stderr)
		}
		out = o
		return nil
	})
	return out
}

// waitTLSVoters waits until n's configuration has exactly the voters ids.
func waitTLSVoters(t *testing.T, n *proctest.Node, ids []string, timeout time.Duration) {
	t.Helper()
	want := strings.Join(ids, ",")
	proctest.Poll(t, timeout, func() error {
		r, err := n.Do("GET", "/v1/cluster/peers", "", nil)
		if err != nil {
			return err
		}
		var ps []struct {
			ID    string `json:"id"`
			Voter bool   `json:"voter"`
		}
		if err := json.Unmarshal(r.Raw, &ps); err != nil {
			return fmt.Errorf("peers: %w: %s", err, r.Raw)
		}
		var voters []string
		for _, p := range ps {
			if p.Voter {
				voters = append(voters, p.ID)
			}
		}
		if got := strings.Join(sortedCopy(voters), ","); got != want {
			return fmt.Errorf("voters %s, want %s (%s)", got, want, r.Raw)
		}
		return nil
	})
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// spendMany makes one hit for each of k clients, 64 to a request.
func spendMany(t *testing.T, n *proctest.Node, k int) {
	t.Helper()
	for i := 0; i < k; i += 64 {
		var keys []map[string]any
		for j := i; j < min(i+64, k); j++ {
			keys = append(keys, map[string]any{"client": fmt.Sprintf("c%d", j)})
		}
		r, err := n.Do("POST", "/v1/check", "", map[string]any{"hits": keys})
		if err != nil || r.Status != 200 {
			t.Fatalf("batch check: %v %d %s", err, r.Status, r.Raw)
		}
	}
}

// waitSnapshotOnDisk waits, polling fast, until a complete snapshot (a
// directory that is not raft's ".tmp" one) is in dataDir.
func waitSnapshotOnDisk(t *testing.T, dataDir string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		ents, _ := os.ReadDir(filepath.Join(dataDir, "snapshots"))
		for _, e := range ents {
			if e.IsDir() && !strings.HasSuffix(e.Name(), ".tmp") {
				return
			}
		}
		time.Sleep(200 * time.Microsecond)
	}
	var files []string
	filepath.WalkDir(dataDir, func(path string, _ os.DirEntry, _ error) error { files = append(files, path); return nil })
	t.Fatalf("no snapshot in %s after %s: %v", dataDir, timeout, files)
}

// A node removed while it was down, restarted on its old data dir with
// --join: it asks the leader, learns it is no longer a member, moves its
// state aside (kept in discarded-*/) and joins empty, a voter again.
// Before, the restart said "node has Raft state; ignoring --join" and the
// node stayed out until an operator emptied its data dir by hand. A
// member restarted the same way keeps its state.
func TestRestartWithJoinRejoinsANodeTheClusterRemoved(t *testing.T) {
	proctest.Long(t)
	dir := t.TempDir()
	proctest.TLSInit(t, rlnodeBin, dir, "n1", "n2", "n3")
	n1 := startTLSNode(t, dir, "n1")
	proctest.WaitReady(t, n1, 15*time.Second)
	n2 := startTLSNode(t, dir, "n2", "--join", n1.URL())
	n3 := startTLSNode(t, dir, "n3", "--join", n1.URL())
	waitTLSVoters(t, n1, []string{"n1", "n2", "n3"}, 30*time.Second)

	// A member restarted with --join keeps its state.
	n2.Kill()
	n2.Restart()
	proctest.WaitReady(t, n2, 30*time.Second)
	if aside, _ := filepath.Glob(filepath.Join(n2.DataDir, "discarded-*")); len(aside) != 0 {
		t.Fatalf("a member restarted with --join moved its state aside: %v", aside)
	}

	n3.Kill()
	tlsAdmin(t, dir, "remove", "--addr", n1.HTTPAddr, "n3")
	waitTLSVoters(t, n1, []string{"n1", "n2"}, 30*time.Second)
	n3.Restart()
	waitTLSVoters(t, n1, []string{"n1", "n2", "n3"}, 60*time.Second)
	proctest.WaitReady(t, n3, 30*time.Second)
	if aside, _ := filepath.Glob(filepath.Join(n3.DataDir, "discarded-*", "node.json")); len(aside) != 1 {
		t.Fatalf("the old state was not kept aside: %v", aside)
	}
	if !strings.Contains(n3.Output(), "says this node is not a member") {
		t.Errorf("n3 did not say why it rejoined empty:\n%s", n3.Output())
	}
}

// The same with --bootstrap-expect, as a Kubernetes StatefulSet's pods
// run: once its state is moved aside, the removed node finds members with
// state and joins them.
func TestRestartWithBootstrapExpectRejoinsARemovedNode(t *testing.T) {
	proctest.Long(t)
	nodes := proctest.StartSymmetric(t, rlnodeBin, 3)
	for _, n := range nodes {
		proctest.WaitReady(t, n, 30*time.Second)
	}
	proctest.WaitVoters(t, nodes[0], 3, 30*time.Second)
	n3 := nodes[2]
	n3.Kill()
	removeNode(t, nodes[0], "", "n3")
	proctest.WaitVoters(t, nodes[0], 2, 30*time.Second)
	n3.Restart()
	proctest.WaitVoters(t, nodes[0], 3, 60*time.Second)
	proctest.WaitReady(t, n3, 30*time.Second)
	if aside, _ := filepath.Glob(filepath.Join(n3.DataDir, "discarded-*", "node.json")); len(aside) != 1 {
		t.Fatalf("the old state was not kept aside: %v", aside)
	}
}
