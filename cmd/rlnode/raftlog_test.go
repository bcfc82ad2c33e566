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

// window is what a client's next hit must show after a restart.
type window struct{ remaining, resetAt int64 }

// spend makes hits hits for each of clients keys, spread over the nodes, and
// returns each key's window after them.
func spend(t *testing.T, nodes []*proctest.Node, keys, hits int) map[string]window {
	t.Helper()
	out := map[string]window{}
	for k := 0; k < keys; k++ {
		key := fmt.Sprintf("mig-%d", k)
		for h := 0; h < hits; h++ {
			n := nodes[(k+h)%len(nodes)]
			r := proctest.MustGet(t, n.URL()+"/check/"+key)
			if r.Status != 200 {
				t.Fatalf("hit %s via %s: %d %s", key, n.ID, r.Status, r.Raw)
			}
			out[key] = window{r.Num("remaining"), r.Num("resetAt")}
		}
	}
	return out
}

// checkWindows makes one more hit per key and wants it to continue the
// window it had: one fewer remaining, the same resetAt.
func checkWindows(t *testing.T, nodes []*proctest.Node, want map[string]window, when string) map[string]window {
	t.Helper()
	next := map[string]window{}
	i := 0
	for key, w := range want {
		n := nodes[i%len(nodes)]
		i++
		r := proctest.MustGet(t, n.URL()+"/check/"+key)
		if r.Status != 200 || r.Num("remaining") != w.remaining-1 || r.Num("resetAt") != w.resetAt {
			t.Fatalf("%s, %s via %s: %d %s; want remaining %d, resetAt %d", when, key, n.ID, r.Status, r.Raw, w.remaining-1, w.resetAt)
		}
		next[key] = window{w.remaining - 1, w.resetAt}
	}
	return next
}

func stopAll(t *testing.T, nodes []*proctest.Node) {
	t.Helper()
	for _, n := range nodes {
		if code := n.Signal(syscall.SIGTERM, 20*time.Second); code != 0 {
			t.Fatalf("%s: SIGTERM exit %d\n%s", n.ID, code, n.Output())
		}
	}
}

func migrateAll(t *testing.T, nodes []*proctest.Node, to string) {
	t.Helper()
	for _, n := range nodes {
		out, stderr, code := proctest.Run(t, rlnodeBin, nil, "migrate-log", "--data-dir", n.DataDir, "--to", to)
		if code != 0 || !strings.Contains(out, "verified") || !strings.Contains(out, "to "+to) {
			t.Fatalf("migrate-log %s --to %s: exit %d\nstdout %s\nstderr %s", n.ID, to, code, out, stderr)
		}
	}
}

func restartAll(t *testing.T, nodes []*proctest.Node, kind string) {
	t.Helper()
	for _, n := range nodes {
		n.Restart()
	}
	for _, n := range nodes {
		proctest.WaitReady(t, n, 20*time.Second)
		st, err := proctest.Status(n)
		if err != nil || st["raftLog"] != kind {
			t.Fatalf("%s after restart: raftLog %v (%v); want %s", n.ID, st["raftLog"], err, kind)
		}
	}
}

// A three-node cluster converted bolt -> wal -> bolt, one stopped node at a
// time through `rlnode migrate-log`, keeps every window, including entries
// behind a snapshot (the log does not start at 1).
func TestMigrateLogBothWaysKeepsEveryWindow(t *testing.T) {
	proctest.Long(t)
	t.Setenv("RLNODE_RAFT_LOG", "bolt")
	nodes := proctest.StartCluster(t, rlnodeBin, 3, "--limit", "100", "--trailing-logs", "2")
	t.Setenv("RLNODE_RAFT_LOG", "") // restarts read the kind from the data dir
	want := spend(t, nodes, 12, 3)
	for _, n := range nodes {
		if _, stderr, code := proctest.Run(t, rlnodeBin, nil, "snapshot", "--addr", n.URL()); code != 0 {
			t.Fatalf("snapshot %s: %s", n.ID, stderr)
		}
	}
	for k, w := range spend(t, nodes, 4, 2) { // entries after the snapshot
		want[k] = w
	}

	stopAll(t, nodes)
	migrateAll(t, nodes, "wal")
	for _, n := range nodes {
		if st, err := os.Stat(filepath.Join(n.DataDir, "wal")); err != nil || !st.IsDir() {
			t.Fatalf("%s: no wal/ after migrate-log --to wal: %v", n.ID, err)
		}
		if backups, _ := filepath.Glob(filepath.Join(n.DataDir, "raft.db.bolt-log-*")); len(backups) != 1 {
			t.Fatalf("%s: want one backup of the bolt log, have %v", n.ID, backups)
		}
	}
	restartAll(t, nodes, "wal")
	want = checkWindows(t, nodes, want, "after bolt -> wal")

	stopAll(t, nodes)
	migrateAll(t, nodes, "bolt")
	restartAll(t, nodes, "bolt")
	checkWindows(t, nodes, want, "after wal -> bolt")
}

// Both kinds serve; a data dir keeps its kind, a flag that disagrees is
// refused with the way out, and migrate-log refuses what it cannot do.
func TestRaftLogKindIsKeptAndMismatchRefused(t *testing.T) {
	proctest.Long(t)
	t.Setenv("RLNODE_RAFT_LOG", "")
	for _, kind := range []string{"wal", "bolt"} {
		other := map[string]string{"wal": "bolt", "bolt": "wal"}[kind]
		n := proctest.StartNode(t, rlnodeBin, "k-"+kind, "--raft-log", kind)
		proctest.WaitReady(t, n, 15*time.Second)
		if st, err := proctest.Status(n); err != nil || st["raftLog"] != kind {
			t.Fatalf("--raft-log %s: status raftLog %v (%v)", kind, st["raftLog"], err)
		}
		r := proctest.MustGet(t, n.URL()+"/check/k")
		if r.Status != 200 {
			t.Fatalf("%s: %d %s", kind, r.Status, r.Raw)
		}
		_, stderr, code := proctest.Run(t, rlnodeBin, nil, "migrate-log", "--data-dir", n.DataDir, "--to", other)
		if code != 1 || !strings.Contains(stderr, "locked by another process") {
			t.Fatalf("migrate-log of a running node: exit %d, %s", code, stderr)
		}
		n.Signal(syscall.SIGTERM, 20*time.Second)

		args := []string{"serve", "--id", n.ID, "--data-dir", n.DataDir, "--http-addr", proctest.FreeAddr(t), "--raft-addr", proctest.FreeAddr(t)}
		_, stderr, code = proctest.Run(t, rlnodeBin, nil, append(args, "--raft-log", other)...)
		if code != 1 || !strings.Contains(stderr, "holds a "+kind+" raft log, not "+other) || !strings.Contains(stderr, "rlnode migrate-log --data-dir "+n.DataDir+" --to "+other) {
			t.Fatalf("serve --raft-log %s on a %s dir: exit %d, stderr %q", other, kind, code, stderr)
		}
		_, stderr, code = proctest.Run(t, rlnodeBin, nil, "migrate-log", "--data-dir", n.DataDir, "--to", kind)
		if code != 1 || !strings.Contains(stderr, "already holds a "+kind+" raft log") {
			t.Fatalf("migrate-log to the same kind: exit %d, %s", code, stderr)
		}
		n.Restart() // no flag: the kind on disk
		proctest.WaitReady(t, n, 15*time.Second)
		if r := proctest.MustGet(t, n.URL()+"/check/k"); r.Status != 200 || r.Num("remaining") != 8 {
			t.Fatalf("%s after restart: %d %s", kind, r.Status, r.Raw)
		}
	}
	_, stderr, code := proctest.Run(t, rlnodeBin, nil, "migrate-log", "--data-dir", t.TempDir(), "--to", "wal")
	if code != 1 || !strings.Contains(stderr, "holds no raft log") {
		t.Fatalf("migrate-log of an empty dir: exit %d, %s", code, stderr)
	}
	_, stderr, code = proctest.Run(t, rlnodeBin, nil, "serve", "--raft-log", "lsm", "--data-dir", t.TempDir())
	if code != 2 || !strings.Contains(stderr, `--raft-log "lsm": want wal or bolt`) {
		t.Fatalf("serve --raft-log lsm: exit %d, %s", code, stderr)
	}
}

// A damaged WAL is a clear error, never a panic, and the files are left as
// they were for the operator.
func TestCorruptWALIsAClearError(t *testing.T) {
	t.Setenv("RLNODE_RAFT_LOG", "")
	n := proctest.StartNode(t, rlnodeBin, "c", "--raft-log", "wal")
	proctest.WaitReady(t, n, 15*time.Second)
	proctest.MustGet(t, n.URL()+"/check/c")
	n.Signal(syscall.SIGTERM, 20*time.Second)
	meta := filepath.Join(n.DataDir, "wal", "wal-meta.db")
	junk := []byte(strings.Repeat("not a bolt file ", 300))
	if err := os.WriteFile(meta, junk, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"serve", "--id", "c", "--data-dir", n.DataDir, "--http-addr", proctest.FreeAddr(t), "--raft-addr", proctest.FreeAddr(t)},
		{"migrate-log", "--data-dir", n.DataDir, "--to", "bolt"},
	} {
		_, stderr, code := proctest.Run(t, rlnodeBin, nil, args...)
		if code != 1 || !strings.Contains(stderr, "corrupt WAL") || strings.Contains(stderr, "goroutine") {
			t.Fatalf("%s on a corrupt WAL: exit %d, stderr %q", args[0], code, stderr)
		}
	}
	if b, _ := os.ReadFile(meta); string(b) != string(junk) {
		t.Fatal("the corrupt file was modified")
	}
	if _, err := os.Stat(filepath.Join(n.DataDir, "raft.db.migrating")); !os.IsNotExist(err) {
		t.Fatalf("a failed migrate-log left raft.db.migrating behind: %v", err)
	}
}
