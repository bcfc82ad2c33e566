package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// Snapshots live in <data-dir>/snapshots/<id>; a data dir from an older
// rlnode keeps <data-dir>/snapshots/snapshots/<id>, and still restores
// from it and snapshots into it.
func TestSnapshotLayoutNewAndOld(t *testing.T) {
	proctest.Long(t)
	n := proctest.StartNode(t, rlnodeBin, "s1", "--limit", "2")
	proctest.WaitReady(t, n, 15*time.Second)
	proctest.MustGet(t, n.URL()+"/check/kept")
	if _, stderr, code := proctest.Run(t, rlnodeBin, nil, "snapshot", "--addr", n.URL()); code != 0 {
		t.Fatalf("snapshot: %s", stderr)
	}
	if code := n.Signal(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("stop: exit %d", code)
	}
	snaps := filepath.Join(n.DataDir, "snapshots")
	ids, _ := filepath.Glob(filepath.Join(snaps, "*-*-*"))
	if len(ids) != 1 {
		t.Fatalf("new layout: want one snapshot directly in %s, have %v", snaps, ids)
	}

	// Turn it into the old layout, as an older rlnode left it.
	old := filepath.Join(snaps, "snapshots")
	if err := os.MkdirAll(old, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(ids[0], filepath.Join(old, filepath.Base(ids[0]))); err != nil {
		t.Fatal(err)
	}
	n.Restart()
	proctest.WaitReady(t, n, 15*time.Second)
	st, err := proctest.Status(n)
	if err != nil {
		t.Fatal(err)
	}
	if st["lastSnapshotIndex"].(float64) == 0 {
		t.Fatalf("the old-layout snapshot was not found: %v", st)
	}
	if r := proctest.MustGet(t, n.URL()+"/check/kept"); r.Status != 200 || r.Num("remaining") != 0 {
		t.Fatalf("after restart on the old layout: %d %s", r.Status, r.Raw)
	}
	if _, stderr, code := proctest.Run(t, rlnodeBin, nil, "snapshot", "--addr", n.URL()); code != 0 {
		t.Fatalf("snapshot on the old layout: %s", stderr)
	}
	if got, _ := filepath.Glob(filepath.Join(old, "*-*-*")); len(got) != 2 {
		t.Fatalf("old layout: want both snapshots in %s, have %v", old, got)
	}
}
