package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

const permitToken = "perm1t"

func putConcurrencyPolicy(t *testing.T, n *proctest.Node, name string, limit int) {
	t.Helper()
	// A concurrency policy needs every voter on format R4: the version
	// gate opens once this node has read every voter's format (clock
	// readings, once a second), so a cluster just formed may refuse it
	// for a moment with 409 cluster_upgrading.
	var out, stderr string
	var code int
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, stderr, code = proctest.Run(t, rlnodeBin, nil, "policy", "set", name, "--algorithm", "concurrency", "--limit", strconv.Itoa(limit),
			"--addr", n.URL(), "--cluster-token", permitToken)
		if code == 0 || !strings.Contains(stderr, "log format 4") || time.Now().After(deadline) {
			break
		}
	}
	if code != 0 || !strings.Contains(out, fmt.Sprintf("%d concurrent", limit)) {
		t.Fatalf("policy set: exit %d\n%s%s", code, out, stderr)
	}
}

// waitClusterFormat4 waits until every node has seen every member report
// log format 4: the version gate opens then, and stays open when the
// leader is killed.
func waitClusterFormat4(t *testing.T, nodes []*proctest.Node) {
	t.Helper()
	for _, n := range nodes {
		proctest.Poll(t, 15*time.Second, func() error {
			// At least 4: a later format still opens the R4 gate.
			if st, err := proctest.Status(n); err != nil || st["clusterFormat"] == nil || st["clusterFormat"].(float64) < 4 {
				return fmt.Errorf("%s: cluster format %v (%v); want 4 or more", n.ID, st["clusterFormat"], err)
			}
			return nil
		})
	}
}

func acquire(t *testing.T, n *proctest.Node, ttl string) (proctest.Response, error) {
	return n.Do("POST", "/v1/permits", "app", map[string]string{"policy": "jobs", "client": "u", "ttl": ttl})
}

// TestPermitHolderKilledFreesAtTTL: an application holding permits is
// killed with SIGKILL; its permits stay live until their TTL (the limit
// holds) and free then, with nobody releasing them.
func TestPermitHolderKilledFreesAtTTL(t *testing.T) {
	nodes := proctest.StartCluster(t, rlnodeBin, 1, "--cluster-token", permitToken)
	putConcurrencyPolicy(t, nodes[0], "jobs", 2)
	root, err := proctest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "permitapp")
	build := exec.Command("go", "build", "-o", bin, "./cmd/rlnode/internal/permitapp")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build permitapp: %v\n%s", err, out)
	}
	app := proctest.Start(t, bin, "permitapp", "-addrs", nodes[0].HTTPAddr, "-n", "2", "-ttl", "4s")
	var expires int64
	proctest.Poll(t, 20*time.Second, func() error {
		out := app.Output()
		if !strings.Contains(out, "holding") {
			return fmt.Errorf("app output %q", out)
		}
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) == 3 && f[0] == "permit" {
				ms, _ := strconv.ParseInt(f[2], 10, 64)
				expires = max(expires, ms)
			}
		}
		return nil
	})
	if seen := time.Now().UnixMilli(); expires > seen+4000+50 {
		t.Fatalf("the permits expire %d ms after they were taken, asked 4s", expires-seen)
	}
	app.Kill()
	r, err := acquire(t, nodes[0], "10s")
	if err != nil || r.Status != 429 || r.Header.Get("Retry-After") == "" {
		t.Fatalf("acquire with the killed holder's 2 of 2 live: %v %d %s", err, r.Status, r.Raw)
	}
	for {
		r, err := acquire(t, nodes[0], "10s")
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now().UnixMilli()
		if r.Status == 201 {
			// Same machine, same clock: the slot came free at the TTL,
			// not before (a few ms of whole-ms stamping aside).
			if now < expires-50 {
				t.Fatalf("a permit freed %d ms before its TTL", expires-now)
			}
			t.Logf("freed %d ms after the TTL", now-expires)
			break
		}
		if r.Status != 429 || now > expires+10_000 {
			t.Fatalf("acquire at %d ms after the TTL: %d %s", now-expires, r.Status, r.Raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestPermitsSurviveAKilledLeader: permits live when the leader is killed
// with SIGKILL are neither lost nor doubled: the key still holds exactly
// its limit, and each releases once. With one node the leader comes back
// from its own log; with three a new leader takes over (the version gate
// opens on its own once every node reports format 4).
func TestPermitsSurviveAKilledLeader(t *testing.T) {
	for _, size := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d nodes", size), func(t *testing.T) {
			nodes := proctest.StartCluster(t, rlnodeBin, size, "--cluster-token", permitToken)
			waitClusterFormat4(t, nodes)
			leader := leaderOf(t, nodes)
			putConcurrencyPolicy(t, leader, "jobs", 2)
			// Through the last node at once: a follower that has not applied
			// the policy yet asks the leader's table, never 404s.
			var ids []string
			for range 2 {
				r, err := acquire(t, nodes[len(nodes)-1], "1m")
				if err != nil || r.Status != 201 {
					t.Fatalf("acquire: %v %d %s", err, r.Status, r.Raw)
				}
				ids = append(ids, r.JSON["permit"].(string))
			}
			leader.Kill()
			survivor := leader
			if size == 1 {
				leader.Restart()
			} else {
				survivor = nodes[0]
				if survivor == leader {
					survivor = nodes[1]
				}
			}
			proctest.WaitReady(t, survivor, 30*time.Second)
			var r proctest.Response
			proctest.Poll(t, 30*time.Second, func() error {
				var err error
				r, err = acquire(t, survivor, "1m")
				if err != nil || r.Status/100 == 5 {
					return fmt.Errorf("acquire: %v %d %s", err, r.Status, r.Raw)
				}
				return nil
			})
			if r.Status != 429 || r.Num("live") != 2 {
				t.Fatalf("after the leader was killed: %d %s; want 429 with 2 live (none lost)", r.Status, r.Raw)
			}
			for _, id := range ids {
				if r, err := survivor.Do("DELETE", "/v1/permits/"+id, "app", nil); err != nil || r.Status != 200 {
					t.Fatalf("release %s: %v %d %s", id, err, r.Status, r.Raw)
				}
			}
			for i := range 3 {
				r, err := acquire(t, survivor, "1m")
				if want := map[bool]int{true: 201, false: 429}[i < 2]; err != nil || r.Status != want {
					t.Fatalf("acquire %d after the releases: %v %d %s; want %d (none doubled)", i+1, err, r.Status, r.Raw, want)
				}
			}
		})
	}
}

// TestPermitCLI: rlnode permit acquire, renew and release, and the node's
// --max-permit-ttl.
func TestPermitCLI(t *testing.T) {
	nodes := proctest.StartCluster(t, rlnodeBin, 1, "--cluster-token", permitToken, "--max-permit-ttl", "5m")
	putConcurrencyPolicy(t, nodes[0], "jobs", 1)
	run := func(args ...string) (string, string, int) {
		return proctest.Run(t, rlnodeBin, nil, append(args, "--addr", nodes[0].URL(), "--cluster-token", permitToken)...)
	}
	out, stderr, code := run("permit", "acquire", "jobs", "u", "--ttl", "1m")
	if code != 0 || !strings.Contains(out, "1 of 1 live") {
		t.Fatalf("acquire: exit %d\n%s%s", code, out, stderr)
	}
	id := strings.Fields(out)[0]
	if _, stderr, code := run("permit", "acquire", "jobs", "u"); code == 0 || !strings.Contains(stderr, "429") {
		t.Fatalf("second acquire of 1: exit %d %s", code, stderr)
	}
	if out, stderr, code := run("permit", "renew", id, "--ttl", "2m"); code != 0 || !strings.HasPrefix(out, id) {
		t.Fatalf("renew: exit %d\n%s%s", code, out, stderr)
	}
	if out, stderr, code := run("permit", "release", id); code != 0 || !strings.Contains(out, "released "+id) {
		t.Fatalf("release: exit %d\n%s%s", code, out, stderr)
	}
	if _, stderr, code := run("permit", "release", id); code == 0 || !strings.Contains(stderr, "404") {
		t.Fatalf("second release: exit %d %s", code, stderr)
	}
	for _, ttl := range []string{"10m", "2h"} {
		if _, stderr, code := run("permit", "acquire", "jobs", "u", "--ttl", ttl); code == 0 || !strings.Contains(stderr, "HTTP 400: ttl") || !strings.Contains(stderr, "--max-permit-ttl") {
			t.Fatalf("ttl %s over --max-permit-ttl 5m: exit %d %s", ttl, code, stderr)
		}
	}
	if _, stderr, code := proctest.Run(t, rlnodeBin, nil, "serve", "--max-permit-ttl", "2h"); code == 0 || !strings.Contains(stderr, "--max-permit-ttl 2h0m0s") {
		t.Fatalf("serve --max-permit-ttl 2h: exit %d %s", code, stderr)
	}
}
