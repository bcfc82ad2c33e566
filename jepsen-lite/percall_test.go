package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestPerCallWorkloadOnOneNode runs the per-call workload against one real
// rlnode process and judges it with the per-call model: valid, with items
// of both algorithms allowed and refused (the three-node case is
// jepsen-lite's own run, under its nemeses).
func TestPerCallWorkloadOnOneNode(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs rlnode")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "rlnode")
	build := exec.Command("go", "build", "-o", bin, "./cmd/rlnode")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	httpAddr, raftAddr := freeAddr(t), freeAddr(t)
	node := exec.Command(bin, "serve", "--id", "n1", "--http-addr", httpAddr, "--raft-addr", raftAddr, "--data-dir", filepath.Join(dir, "n1"))
	node.Stdout, node.Stderr = os.Stderr, os.Stderr
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		node.Process.Kill()
		node.Wait()
	})
	url := "http://" + httpAddr
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("node not ready")
		}
	}
	w, skipped := newPerCall(context.Background(), []string{url}, nil, 2*time.Second, time.Second, 1, time.Now(), 10*time.Second)
	if skipped != "" {
		t.Fatal(skipped)
	}
	time.Sleep(4 * time.Second)
	ops := w.stop()
	v, detail := checkPerCall(ops, time.Second, 0)
	t.Log(detail)
	if len(v) > 0 {
		t.Fatalf("violations: %+v", v)
	}
	refused := map[bool]int{}
	for _, op := range ops {
		if op.Outcome == "ok" && !op.Allowed {
			refused[op.Leaky]++
		}
	}
	if refused[false] == 0 || refused[true] == 0 {
		t.Fatalf("vacuous: %d token and %d leaky items refused of %d", refused[false], refused[true], len(ops))
	}
}
