package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// smallDisk mounts a tmpfs of the given size (e.g. "64k") in a temp dir
// for the test, and unmounts it when the test ends; it skips the test
// where mounting is not allowed.
func smallDisk(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}

// fillDisk writes a file into dir until the disk is full and returns it.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", dir, err)
			}
			break
		}
	}
	for _, n := range []int{4096, 512, 1} { // the last bytes too
		for {
			if _, err := f.Write(chunk[:n]); err != nil {
				break
			}
		}
	}
	return path
}

// A node started on a full disk says the disk is full, not that its WAL is
// corrupt (whose advice, --rejoin-empty, would discard its state).
func TestFreshNodeOnFullDiskSaysSo(t *testing.T) {
	disk := smallDisk(t, "1m")
	fillDisk(t, disk)
	n := proctest.StartNodeIn(t, rlnodeBin, "full", filepath.Join(disk, "data"))
	if code := n.Wait(30 * time.Second); code != 1 {
		t.Fatalf("node on a full disk: exit %d, want 1\n%s", code, n.Output())
	}
	out := n.Output()
	if !strings.Contains(out, "is full (no space left on device)") || strings.Contains(out, "corrupt") ||
		!strings.Contains(out, "Do not use --rejoin-empty") {
		t.Fatalf("node on a full disk said:\n%s", out)
	}
}

// A follower whose disk fills up answers /readyz 503 saying so (it still
// hears the leader's heartbeats), and is ready again once space is freed.
func TestFollowerOnFullDiskIsNotReady(t *testing.T) {
	disk := smallDisk(t, "16m")
	n1 := proctest.StartNode(t, rlnodeBin, "n1")
	proctest.WaitReady(t, n1, 15*time.Second)
	n2 := proctest.StartNode(t, rlnodeBin, "n2", "--join", n1.URL())
	n3 := proctest.StartNodeIn(t, rlnodeBin, "n3", filepath.Join(disk, "n3"), "--join", n1.URL(), "--raft-log", "bolt")
	for _, n := range []*proctest.Node{n2, n3} {
		proctest.WaitReady(t, n, 30*time.Second)
	}
	proctest.WaitVoters(t, n1, 3, 30*time.Second)

	filler := fillDisk(t, disk)
	proctest.Poll(t, 60*time.Second, func() error {
		// Hits are log entries: n3 must try, and fail, to store them.
		for i := range 20 {
			proctest.Get(fmt.Sprintf("%s/check/c%d", n1.URL(), i))
		}
		r, err := n3.Do("GET", "/readyz", "", nil)
		if err != nil {
			return err
		}
		if r.Status != 503 || !strings.Contains(fmt.Sprint(r.JSON["detail"]), "the disk is full") {
			return fmt.Errorf("n3 /readyz with a full disk: %d %s", r.Status, r.Raw)
		}
		return nil
	})
	if r := proctest.MustGet(t, n1.URL()+"/check/after-full"); r.Status != 200 {
		t.Fatalf("the cluster stopped serving with one follower's disk full: %d %s", r.Status, r.Raw)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	proctest.Poll(t, 60*time.Second, func() error {
		proctest.Get(n1.URL() + "/check/after-free")
		r, err := n3.Do("GET", "/readyz", "", nil)
		if err != nil {
			return err
		}
		if r.Status != 200 {
			return fmt.Errorf("n3 /readyz after freeing space: %d %s", r.Status, r.Raw)
		}
		return nil
	})
}

// A snapshot that failed part-way leaves a "*.tmp" directory; the node
// removes it when it starts.
func TestFailedSnapshotTempDirRemovedAtStart(t *testing.T) {
	n := proctest.StartNode(t, rlnodeBin, "snap")
	proctest.WaitReady(t, n, 15*time.Second)
	if code := n.Signal(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("stop: exit %d", code)
	}
	store := filepath.Join(n.DataDir, "snapshots") // raft's snapshot store: snapshots/ or snapshots/snapshots/
	if st, err := os.Stat(filepath.Join(store, "snapshots")); err == nil && st.IsDir() {
		store = filepath.Join(store, "snapshots")
	}
	tmp := filepath.Join(store, "2-17-1700000000000.tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "state.bin"), make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	n.Restart()
	proctest.WaitReady(t, n, 15*time.Second)
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s is still there after a restart (%v)", tmp, err)
	}
}
