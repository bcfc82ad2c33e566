package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
	"github.com/rlnode/rlnode/fsm"
)

// previousRelease is the release a rolling upgrade starts from: the
// commit whose log format is fsm.FormatR3. Move it on to each release
// when it is cut (scripts/release.sh, CHANGELOG.md).
const previousRelease = "bd9eb85f1ad080e1334c77a19bcb3077f90d91e1"

// gatedWrites are this release's writes that round 3 cannot apply (log
// format 4): a concurrency policy (algorithm byte 5) and a reservation
// (entry kind 11). An old leader would refuse the first with a 400 and
// not know the second; a node of the new release answers both with 409
// cluster_upgrading while any member is old.
var gatedWrites = []struct{ what, method, path, body string }{
	{"concurrency policy", "PUT", "/v1/policies/inflight", `{"algorithm":"concurrency","limits":[{"limit":4}]}`},
	{"reservation", "POST", "/v1/reservations", `{"policy":"keep","client":"resv","units":3,"ttl":"30s"}`},
}

var upgradeBins struct {
	once     sync.Once
	old, new string
	skip     string
	err      error
}

// buildUpgradeBins builds the previous release from git history and this
// tree, once per test binary.
func buildUpgradeBins(t *testing.T) (oldBin, newBin string) {
	t.Helper()
	upgradeBins.once.Do(func() {
		root, err := proctest.RepoRoot()
		if err != nil {
			upgradeBins.err = err
			return
		}
		if err := exec.Command("git", "-C", root, "cat-file", "-e", previousRelease+"^{commit}").Run(); err != nil {
			upgradeBins.skip = fmt.Sprintf("the previous release %s is not in this clone's history (a shallow clone?); "+
				"run `git fetch --unshallow` to test rolling upgrades from it", previousRelease[:7])
			return
		}
		dir, err := os.MkdirTemp("", "rlnode-upgrade-")
		if err != nil {
			upgradeBins.err = err
			return
		}
		src := filepath.Join(dir, "src")
		if err := os.Mkdir(src, 0o755); err != nil {
			upgradeBins.err = err
			return
		}
		tarball := filepath.Join(dir, "src.tar")
		if out, err := exec.Command("git", "-C", root, "archive", "--format=tar", "-o", tarball, previousRelease).CombinedOutput(); err != nil {
			upgradeBins.err = fmt.Errorf("git archive %s: %v\n%s", previousRelease, err, out)
			return
		}
		if out, err := exec.Command("tar", "-xf", tarball, "-C", src).CombinedOutput(); err != nil {
			upgradeBins.err = fmt.Errorf("unpack %s: %v\n%s", previousRelease, err, out)
			return
		}
		if upgradeBins.old, err = proctest.BuildFrom(src, filepath.Join(dir, "rlnode-old"), "-ldflags", "-X main.version="+previousRelease[:7]); err != nil {
			upgradeBins.err = err
			return
		}
		upgradeBins.new, upgradeBins.err = proctest.BuildFrom(root, filepath.Join(dir, "rlnode-new"),
			"-ldflags", "-X main.version=r4-test")
	})
	if upgradeBins.skip != "" {
		t.Skip(upgradeBins.skip)
	}
	if upgradeBins.err != nil {
		t.Fatal(upgradeBins.err)
	}
	return upgradeBins.old, upgradeBins.new
}

// TestRollingUpgradeFromPreviousRelease starts three nodes of the previous
// release with policies, windows and load, and replaces them one at a
// time with this build: windows written before read back the same on
// every node after each step, the hot key is never allowed past its
// limit, each restarted node serves within seconds, and nobody halts. A
// write that needs the new format is refused with 409 cluster_upgrading
// naming the old nodes while any is left (also through an upgraded
// leader, as the Done-when asks: a concurrency policy and a
// reservation) and accepted once all are new.
// Both orders: the leader last (after a transfer to the first upgraded
// node) and the leader first.
func TestRollingUpgradeFromPreviousRelease(t *testing.T) {
	proctest.Long(t)
	oldBin, newBin := buildUpgradeBins(t)
	t.Run("leader last", func(t *testing.T) { rollingUpgrade(t, oldBin, newBin, false) })
	t.Run("leader first", func(t *testing.T) { rollingUpgrade(t, oldBin, newBin, true) })
}

// hotLimit is the tight policy's limit; the load sends several times more.
const hotLimit = 20

func rollingUpgrade(t *testing.T, oldBin, newBin string, leaderFirst bool) {
	nodes := proctest.StartCluster(t, oldBin, 3)
	byID := map[string]*proctest.Node{}
	for _, n := range nodes {
		byID[n.ID] = n
	}
	putPolicy(t, nodes[0], "keep", `{"algorithm":"fixed_window","limits":[{"limit":1000,"window":"1h"}]}`, 200, 201)
	putPolicy(t, nodes[1], "tight", fmt.Sprintf(`{"algorithm":"fixed_window","limits":[{"limit":%d,"window":"1h"}]}`, hotLimit), 200, 201)
	want := map[string]int64{}
	for i := range 8 {
		client := fmt.Sprintf("c%d", i)
		for range i + 1 {
			if r, err := nodes[i%3].Do("GET", "/check/keep/"+client, "", nil); err != nil || r.Status != 200 {
				t.Fatalf("hit keep/%s: %v %d %s", client, err, r.Status, r.Raw)
			}
		}
		want[client] = int64(i + 1)
	}
	windowsOnEveryNode(t, nodes, "keep", want)

	// The hot key's budget is spent before the first node is upgraded:
	// from then on every check of it must be refused, through every
	// restart (a lost or reset window would let more through).
	load := startHotLoad(nodes)
	defer load.stop()
	proctest.Poll(t, 20*time.Second, func() error {
		if load.refused.Load() == 0 {
			return fmt.Errorf("hot key not refused yet (%d allowed)", load.allowed.Load())
		}
		return nil
	})

	leader := leaderIDAt(t, nodes[0])
	order := []*proctest.Node{}
	for _, n := range nodes {
		if n.ID != leader {
			order = append(order, n)
		}
	}
	if leaderFirst {
		order = append([]*proctest.Node{byID[leader]}, order...)
	} else {
		order = append(order, byID[leader])
	}
	upgraded := map[string]bool{}
	for step, n := range order {
		took := upgradeNode(t, n, newBin, step)
		upgraded[n.ID] = true
		t.Logf("step %d: %s upgraded (it was %s); serving checks %v after it was started", step+1, n.ID,
			map[bool]string{true: "the leader", false: "a follower"}[n.ID == leader], took.Round(10*time.Millisecond))
		allReady(t, nodes)
		windowsOnEveryNode(t, nodes, "keep", want)
		if step == len(order)-1 {
			break
		}
		var old []string
		for _, m := range nodes {
			if !upgraded[m.ID] {
				old = append(old, m.ID)
			}
		}
		if step == 0 && !leaderFirst {
			// The Done-when: the one upgraded node leads.
			if _, stderr, code := proctest.Run(t, newBin, nil, "transfer-leadership", "--addr", nodes[0].URL(), n.ID); code != 0 {
				t.Fatalf("transfer-leadership to %s: exit %d: %s", n.ID, code, stderr)
			}
			proctest.Poll(t, 20*time.Second, func() error {
				if l := leaderIDAt(t, n); l != n.ID {
					return fmt.Errorf("leader is %q, want %s", l, n.ID)
				}
				return nil
			})
		}
		for _, m := range nodes {
			if upgraded[m.ID] {
				refusedWhileUpgrading(t, m, old)
			}
		}
		if step == 0 {
			versionsShown(t, n, newBin, upgraded)
		}
		allReady(t, nodes)
	}

	// Every node is new: the gate opens by itself within a few readings,
	// and the new features work through every node.
	lastUp := time.Now()
	for _, w := range gatedWrites {
		proctest.Poll(t, 30*time.Second, func() error {
			r, err := proctest.DoRaw(w.method, nodes[2].URL()+w.path, "", []byte(w.body))
			if err != nil {
				return err
			}
			if r.Status != 200 && r.Status != 201 {
				return fmt.Errorf("%s with every node upgraded: %d %s", w.what, r.Status, r.Raw)
			}
			return nil
		})
	}
	t.Logf("gated writes accepted %v after the last node served checks", time.Since(lastUp).Round(10*time.Millisecond))
	for _, n := range nodes {
		// A node checks the policy in its own table: wait until it has it.
		proctest.Poll(t, 10*time.Second, func() error {
			r, err := n.Do("POST", "/v1/permits", "", map[string]any{"policy": "inflight", "client": "alice", "ttl": "30s"})
			if err != nil || r.Status != 201 {
				return fmt.Errorf("permit of the concurrency policy through %s: %v %d %s", n.ID, err, r.Status, r.Raw)
			}
			return nil
		})
	}
	allReady(t, nodes)
	windowsOnEveryNode(t, nodes, "keep", want)
	allowed, refused, failed := load.stop()
	t.Logf("hot key load: %d allowed, %d refused, %d failed (limit %d)", allowed, refused, failed, hotLimit)
	if allowed > hotLimit {
		t.Fatalf("the hot key was allowed %d times across the upgrade; its limit is %d", allowed, hotLimit)
	}
	windowsOnEveryNode(t, nodes, "tight", map[string]int64{"hot": hotLimit})
	waitConverged(t, nodes) // every replica the same state, digest for digest
}

func putPolicy(t *testing.T, n *proctest.Node, name, body string, ok ...int) {
	t.Helper()
	r, err := proctest.DoRaw("PUT", n.URL()+"/v1/policies/"+name, "", []byte(body))
	if err != nil {
		t.Fatalf("PUT policy %s: %v", name, err)
	}
	for _, s := range ok {
		if r.Status == s {
			return
		}
	}
	t.Fatalf("PUT policy %s: %d %s", name, r.Status, r.Raw)
}

// upgradeNode stops n (SIGTERM, as an operator would), starts this build
// on its data dir and flags, and returns how long after the start it
// served a check.
func upgradeNode(t *testing.T, n *proctest.Node, newBin string, step int) time.Duration {
	t.Helper()
	if code := n.Signal(syscall.SIGTERM, 30*time.Second); code == -1 {
		n.Kill()
	}
	n.Bin = newBin
	n.Restart()
	start := time.Now()
	probe := fmt.Sprintf("/check/keep/probe-%d", step)
	proctest.Poll(t, 30*time.Second, func() error {
		r, err := n.Do("GET", probe, "", nil)
		if err != nil || r.Status != 200 {
			return fmt.Errorf("%s after its upgrade: %v %d %s", n.ID, err, r.Status, r.Raw)
		}
		return nil
	})
	took := time.Since(start)
	st, err := proctest.Status(n)
	if err != nil || st["version"] != "r4-test" {
		t.Fatalf("%s after its upgrade: status %v %v; want version r4-test", n.ID, st, err)
	}
	return took
}

// versionsShown checks what a user sees of a mixed cluster through the
// upgraded node n: each member's version and format in GET
// /v1/cluster/members and rlnode peers, and this build's in
// rlnode_build_info.
func versionsShown(t *testing.T, n *proctest.Node, newBin string, upgraded map[string]bool) {
	t.Helper()
	r, err := n.Do("GET", "/v1/cluster/members", "", nil)
	if err != nil || r.Status != 200 {
		t.Fatalf("members via %s: %v %d %s", n.ID, err, r.Status, r.Raw)
	}
	members, _ := r.JSON["members"].([]any)
	if len(members) != 3 {
		t.Fatalf("members via %s: %s", n.ID, r.Raw)
	}
	for _, raw := range members {
		m, _ := raw.(map[string]any)
		id, ver, format := m["id"], m["version"], m["format"]
		if want := upgraded[fmt.Sprint(id)]; want && (ver != "r4-test" || format != float64(fsm.CurrentFormat)) || !want && (ver != "" || format != float64(0)) {
			t.Fatalf("member %v via %s: version %q format %v; want r4-test and 4 upgraded, none and 0 old", id, n.ID, ver, format)
		}
	}
	out, stderr, code := proctest.Run(t, newBin, nil, "peers", "--addr", n.URL())
	if code != 0 || !strings.Contains(out, fmt.Sprintf("r4-test (format %d)", fsm.CurrentFormat)) || !strings.Contains(out, "older (format 3)") {
		t.Fatalf("rlnode peers of a mixed cluster: exit %d\n%s%s", code, out, stderr)
	}
	metrics := proctest.MustGet(t, n.URL()+"/metrics")
	if want := fmt.Sprintf(`rlnode_build_info{format="%d",oldest_format="3",version="r4-test"} 1`, fsm.CurrentFormat); !strings.Contains(string(metrics.Raw), want) {
		t.Fatalf("metrics of %s lack %s", n.ID, want)
	}
	if want := "rlnode_cluster_log_format 3"; !strings.Contains(string(metrics.Raw), want) {
		t.Fatalf("metrics of %s in a mixed cluster lack %s", n.ID, want)
	}
}

// refusedWhileUpgrading asks upgraded node n for each write that needs
// the new format: 409 cluster_upgrading naming exactly the old nodes.
func refusedWhileUpgrading(t *testing.T, n *proctest.Node, old []string) {
	t.Helper()
	for _, w := range gatedWrites {
		proctest.Poll(t, 15*time.Second, func() error {
			r, err := proctest.DoRaw(w.method, n.URL()+w.path, "", []byte(w.body))
			if err != nil {
				return err
			}
			if r.Status != 409 || r.JSON["code"] != "cluster_upgrading" {
				return fmt.Errorf("%s through %s with %v old: %d %s; want 409 cluster_upgrading", w.what, n.ID, old, r.Status, r.Raw)
			}
			detail, _ := r.JSON["detail"].(string)
			_, named, _ := strings.Cut(detail, "(behind: ")
			named, _, _ = strings.Cut(named, ")")
			names := strings.Split(named, ", ")
			slices.Sort(names)
			if !slices.Equal(names, old) {
				return fmt.Errorf("refusal of a %s through %s names %q as behind; want exactly the old nodes %v: %s", w.what, n.ID, named, old, r.Raw)
			}
			t.Logf("%s through %s: %d %s", w.what, n.ID, r.Status, detail)
			return nil
		})
	}
}

// allReady checks that every node is ready and none has halted.
func allReady(t *testing.T, nodes []*proctest.Node) {
	t.Helper()
	for _, n := range nodes {
		proctest.WaitReady(t, n, 20*time.Second)
		if st, err := proctest.Status(n); err != nil || st["halted"] != nil {
			t.Fatalf("%s: status %v %v; want running, not halted", n.ID, st, err)
		}
	}
}

// windowsOnEveryNode reads every window written before the upgrade from each
// node's own state (stale reads, once it has caught up).
func windowsOnEveryNode(t *testing.T, nodes []*proctest.Node, policy string, want map[string]int64) {
	t.Helper()
	for _, n := range nodes {
		proctest.Poll(t, 15*time.Second, func() error {
			for client, used := range want {
				r, err := n.Do("GET", "/v1/status/"+policy+"/"+client+"?stale=true", "", nil)
				if err != nil || r.Status != 200 || r.Num("used") != used {
					return fmt.Errorf("%s: window %s/%s: %v %d %s; want %d used", n.ID, policy, client, err, r.Status, r.Raw, used)
				}
			}
			return nil
		})
	}
}

func leaderIDAt(t *testing.T, n *proctest.Node) string {
	t.Helper()
	st, err := proctest.Status(n)
	if err != nil {
		return ""
	}
	id, _ := st["leaderId"].(string)
	return id
}

// hotLoad sends checks of one hot key of the tight policy through every
// node in turn until stopped, counting the answers.
type hotLoad struct {
	done                     chan struct{}
	wg                       sync.WaitGroup
	allowed, refused, failed atomic.Int64
	once                     sync.Once
}

func startHotLoad(nodes []*proctest.Node) *hotLoad {
	l := &hotLoad{done: make(chan struct{})}
	for w := range 2 {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := w; ; i++ {
				select {
				case <-l.done:
					return
				case <-time.After(20 * time.Millisecond):
				}
				r, err := nodes[i%len(nodes)].Do("GET", "/check/tight/hot", "", nil)
				switch {
				case err == nil && r.Status == 200:
					l.allowed.Add(1)
				case err == nil && r.Status == 429:
					l.refused.Add(1)
				default:
					l.failed.Add(1)
				}
			}
		}()
	}
	return l
}

func (l *hotLoad) stop() (allowed, refused, failed int64) {
	l.once.Do(func() { close(l.done) })
	l.wg.Wait()
	return l.allowed.Load(), l.refused.Load(), l.failed.Load()
}

// TestServeRefusesDataDirOfNewerFormat: a data dir whose format.json
// records a newer log format than this build reads (a newer release ran
// on it after its cluster's gate opened) is refused at start, naming both
// formats and releases, before anything is replayed; the node exits
// rather than halting later.
func TestServeRefusesDataDirOfNewerFormat(t *testing.T) {
	proctest.Long(t)
	n := proctest.StartNode(t, rlnodeBin, "n1")
	proctest.WaitReady(t, n, 15*time.Second)
	if code := n.Signal(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("stop: exit %d", code)
	}
	rec := `{"format":99,"version":"v99.0.0"}`
	if err := os.WriteFile(filepath.Join(n.DataDir, "format.json"), []byte(rec), 0o644); err != nil {
		t.Fatal(err)
	}
	n.Restart()
	if code := n.Wait(20 * time.Second); code == 0 || code == -1 {
		t.Fatalf("start on a data dir of format 99: exit %d; want a refusal\n%s", code, n.Output())
	}
	out := n.Output()
	for _, want := range []string{"may hold log format 99", "rlnode v99.0.0", fmt.Sprintf("reads formats %d to %d", fsm.OldestFormat, fsm.CurrentFormat)} {
		if !strings.Contains(out, want) {
			t.Fatalf("refusal does not say %q:\n%s", want, out)
		}
	}
}
