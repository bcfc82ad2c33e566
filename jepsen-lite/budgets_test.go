package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestBudgetsWorkloadOnOneNode runs the budgets workload against one real
// rlnode process (a cluster of one voter can apply log format 4 today;
// three cannot until the version gate confirms their formats) and judges
// it with the permit and reservation models: valid, and not vacuous.
func TestBudgetsWorkloadOnOneNode(t *testing.T) {
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
	log, err := os.Create(filepath.Join(dir, "n1.log"))
	if err != nil {
		t.Fatal(err)
	}
	node := exec.Command(bin, "serve", "--id", "n1", "--http-addr", httpAddr, "--raft-addr", raftAddr, "--data-dir", filepath.Join(dir, "n1"))
	node.Stdout, node.Stderr = log, log
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		node.Process.Kill()
		node.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("node log:\n%s", b)
		}
	})
	url := "http://" + httpAddr
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("node not ready: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	adm := newAdmin(&security{})
	defer adm.close()
	ctx := context.Background()
	b, skipped := newBudgets(ctx, budgetConfig{adm: adm, urls: []string{url}, timeout: 2 * time.Second, window: time.Second, seed: 1, t0: time.Now()})
	if skipped != "" {
		t.Fatal(skipped)
	}
	time.Sleep(4 * time.Second)
	permits, reservations := b.stop()
	v, detail := checkBudgets(permits, reservations, 0)
	t.Log(detail)
	if len(v) > 0 {
		t.Fatalf("violations: %+v", v)
	}
	refused, settled := 0, 0
	for _, p := range permits {
		if p.Outcome == "ok" && !p.Acquired {
			refused++
		}
	}
	for _, r := range reservations {
		if r.SettleOutcome == "ok" {
			settled++
		}
	}
	if refused == 0 || settled == 0 || len(reservations) < 10 {
		t.Fatalf("vacuous: %d permits refused, %d reservations settled of %d", refused, settled, len(reservations))
	}
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr())
}
