package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlnode/rlnode/jepsen-lite/checker"
)

// TestBudgetsWorkloadOnOneNode runs the budgets workload against one real
// rlnode process and judges it with the permit and reservation models:
// valid, and not vacuous (the three-node case is jepsen-lite's own run,
// under its nemeses).
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

// TestBudgetPolicyWaitsForTheGate: while the cluster answers 409
// cluster_upgrading (the version gate of a cluster just formed), the
// workload asks again instead of skipping; a gate that stays closed past
// the bound, or another refusal, is an error at once.
func TestBudgetPolicyWaitsForTheGate(t *testing.T) {
	gate := func(closedFor int) (*httptest.Server, *atomic.Int32) {
		var asked atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if asked.Add(1) <= int32(closedFor) {
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(http.StatusConflict)
				fmt.Fprint(w, `{"code":"cluster_upgrading","detail":"n2 reports log format 3"}`)
				return
			}
			w.WriteHeader(http.StatusOK)
			fmt.Fprint(w, `{}`)
		}))
		t.Cleanup(srv.Close)
		return srv, &asked
	}
	adm := newAdmin(&security{})
	defer adm.close()
	ctx := context.Background()
	pol := map[string]any{"name": budgetPermitPolicy, "algorithm": "concurrency"}

	srv, asked := gate(3)
	if err := createBudgetPolicy(ctx, adm, []string{srv.URL}, pol, 10*time.Second); err != nil || asked.Load() != 4 {
		t.Fatalf("gate closed for 3 answers: %v after %d requests; want success on the 4th", err, asked.Load())
	}
	srv, _ = gate(1 << 20)
	err := createBudgetPolicy(ctx, adm, []string{srv.URL}, pol, 600*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "gate stayed closed") {
		t.Fatalf("gate never opens: %v; want an error naming the closed gate", err)
	}
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"code":"invalid_request","detail":"algorithm"}`)
	}))
	defer bad.Close()
	start := time.Now()
	if err := createBudgetPolicy(ctx, adm, []string{bad.URL}, pol, 10*time.Second); err == nil || !strings.Contains(err.Error(), "invalid_request") || time.Since(start) > 5*time.Second {
		t.Fatalf("a 400: %v after %s; want the refusal at once", err, time.Since(start))
	}
}

// TestBudgetsThatProveNothingFail: a budgets workload whose every acquire
// or every reservation was refused (all 409 or 404, say) is a violation,
// not a silent pass; the summary counts each kind of outcome.
func TestBudgetsThatProveNothingFail(t *testing.T) {
	permits := []checker.PermitOp{{ID: 1, Key: "p0", Outcome: checker.OutcomeOK, Acquired: true, TTLMs: 1000, Invoke: 1, Return: 2},
		{ID: 2, Key: "p0", Outcome: checker.OutcomeOK}, {ID: 3, Key: "p0", Outcome: checker.OutcomeUnknown}, {ID: 4, Key: "p0", Outcome: outcomeFail}}
	made := []checker.ReservationOp{{ID: 5, Key: "r0", Units: 3, Outcome: checker.OutcomeOK, Reserved: true, Actual: -1}}
	v, detail := checkBudgets(permits, made, 0)
	if len(v) != 0 || detail != "permits: 4 acquires (1 taken, 1 refused, 1 failed, 1 unknown); reservations: 1 (1 made, 0 refused, 0 failed, 0 unknown)" {
		t.Fatalf("a run that took and made some: %+v %q", v, detail)
	}
	refused := []checker.ReservationOp{{ID: 6, Key: "r0", Units: 3, Outcome: outcomeFail, Actual: -1}}
	if v, _ := checkBudgets(permits, refused, 0); len(v) != 1 || v[0].Check != checkBudgetsVacuous {
		t.Fatalf("no reservation made: %+v; want one %s violation", v, checkBudgetsVacuous)
	}
	if v, _ := checkBudgets(permits[1:], made, 0); len(v) != 1 || v[0].Check != checkBudgetsVacuous {
		t.Fatalf("no permit taken: %+v; want one %s violation", v, checkBudgetsVacuous)
	}
}
