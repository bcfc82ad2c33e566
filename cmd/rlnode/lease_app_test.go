package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// buildLeaseApp compiles the application instance the lease process tests
// run (cmd/rlnode/internal/leaseapp).
func buildLeaseApp(t *testing.T) string {
	t.Helper()
	root, err := proctest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "leaseapp")
	build := exec.Command("go", "build", "-o", bin, "./cmd/rlnode/internal/leaseapp")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build leaseapp: %v\n%s", err, out)
	}
	return bin
}

// putLeasedPolicy defines a leased fixed-window policy on the cluster.
func putLeasedPolicy(t *testing.T, n *proctest.Node, name string, limit int64, window string) {
	t.Helper()
	body := map[string]any{"name": name, "algorithm": "fixed_window", "consistency": "leased",
		"limits": []map[string]any{{"limit": limit, "window": window}}}
	proctest.Poll(t, 20*time.Second, func() error {
		r, err := n.Do("PUT", "/v1/policies/"+name, "", body)
		if err != nil {
			return err
		}
		if r.Status != 200 && r.Status != 201 {
			return fmt.Errorf("PUT policy: %d %s", r.Status, r.Raw)
		}
		return nil
	})
}

// admission is one allowed hit as an application logged it.
type admission struct {
	before  int64 // unix ns just before the call
	resetMs int64 // the window's reset, unix ms
	by      string
}

func admissions(t *testing.T, apps []*proctest.Proc) []admission {
	t.Helper()
	var out []admission
	for _, a := range apps {
		for _, line := range strings.Split(a.Output(), "\n") {
			f := strings.Fields(line)
			if len(f) != 4 || f[0] != "allow" {
				continue
			}
			before, err1 := strconv.ParseInt(f[1], 10, 64)
			reset, err2 := strconv.ParseInt(f[2], 10, 64)
			if err1 != nil || err2 != nil {
				continue // a line cut by kill -9
			}
			out = append(out, admission{before: before, resetMs: reset, by: f[3]})
		}
	}
	return out
}

// checkNeverOver asserts what a user of the limit would check: no window
// admitted more than limit hits across every application, and no hit was
// admitted after its window ended (units of one window spent in another).
// It returns how many admissions were decided locally.
func checkNeverOver(t *testing.T, adm []admission, limit int) (local int) {
	t.Helper()
	perWindow := map[int64]int{}
	for _, a := range adm {
		perWindow[a.resetMs]++
		if strings.HasPrefix(a.by, "local:") {
			local++
		}
		if a.before >= a.resetMs*int64(time.Millisecond) {
			t.Errorf("a hit admitted by %s after its window ended: asked at %s, window reset at %s", a.by,
				time.Unix(0, a.before).Format(time.RFC3339Nano), time.UnixMilli(a.resetMs).Format(time.RFC3339Nano))
		}
	}
	for reset, n := range perWindow {
		if n > limit {
			t.Errorf("the window ending %s admitted %d hits, limit %d", time.UnixMilli(reset).Format(time.RFC3339Nano), n, limit)
		}
	}
	t.Logf("%d admissions in %d windows, %d decided in the applications", len(adm), len(perWindow), local)
	return local
}

// Several application processes, each with two holders, share one key of
// a leased policy through client.Local against a three-node cluster: one
// application is paused (SIGSTOP) past its grants' deadlines and resumed,
// one is killed holding grants, then the leader is killed. No window ever
// admits more than the limit, and no hit is admitted after its window.
func TestLeasedApplicationsNeverOverTheLimit(t *testing.T) {
	proctest.Long(t)
	// About the applications' demand: at the end of most windows the
	// budget runs out (the limit is tested), and most of the time every
	// holder has units in hand (a pause or a kill catches some).
	const limit = 600
	app := buildLeaseApp(t)
	nodes := proctest.StartCluster(t, rlnodeBin, 3)
	putLeasedPolicy(t, nodes[0], "shared-api", limit, "1s")
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.HTTPAddr)
	}
	var apps []*proctest.Proc
	for i := 1; i <= 3; i++ {
		apps = append(apps, proctest.Start(t, app, fmt.Sprintf("app%d", i), "-addrs", strings.Join(addrs, ","),
			"-policy", "shared-api", "-key", "k", "-holders", "2", "-every", "10ms", "-lease", "1s"))
	}
	waitAdmissions := func(what string, more int) {
		t.Helper()
		base := len(admissions(t, apps))
		proctest.Poll(t, 60*time.Second, func() error {
			if n := len(admissions(t, apps)); n < base+more {
				return fmt.Errorf("%s: %d admissions so far, waiting for %d more", what, n-base, more)
			}
			return nil
		})
	}
	waitAdmissions("warm-up", 2*limit)

	// Pause one application for longer than any grant lasts.
	if err := syscall.Kill(apps[1].Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitAdmissions("while app2 is paused", limit)
	time.Sleep(1500 * time.Millisecond) // past the 1 s lease: the point of the case
	if err := syscall.Kill(apps[1].Pid(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitAdmissions("after app2 resumed", limit)

	// Kill one application while it holds grants.
	apps[2].Kill()
	waitAdmissions("after app3 died", limit)

	// Kill the leader.
	leaderOf(t, nodes).Kill()
	waitAdmissions("after the leader died", 2*limit)

	for _, a := range apps[:2] {
		a.Signal(syscall.SIGTERM, 20*time.Second)
	}
	if local := checkNeverOver(t, admissions(t, apps), limit); local == 0 {
		t.Errorf("no admission was decided in an application: the keys never got hot")
	}
}
