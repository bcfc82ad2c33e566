package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// leaseAnswer is one check as a user sees it: when it was sent, how it was
// answered, and the window its units belong to.
type leaseAnswer struct {
	node        string
	sent        time.Time
	status      int
	decided     string
	windowStart int64
	resetAt     int64
}

// leaseLoad sends checks of one key to nodes from several goroutines and
// records every answer.
type leaseLoad struct {
	path   string
	client *http.Client
	stop   chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	ans    []leaseAnswer
}

func startLeaseLoad(nodes []*proctest.Node, path string, perNode int) *leaseLoad {
	l := &leaseLoad{path: path, stop: make(chan struct{}),
		client: &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	for _, n := range nodes {
		for range perNode {
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				for {
					select {
					case <-l.stop:
						return
					default:
					}
					l.one(n)
				}
			}()
		}
	}
	return l
}

// one sends a single check and records its answer (not counted or
// unknown answers are kept too: they never allow).
func (l *leaseLoad) one(n *proctest.Node) {
	a := leaseAnswer{node: n.ID, sent: time.Now()}
	resp, err := l.client.Get(n.URL() + l.path)
	if err != nil {
		return
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	a.status, a.decided = resp.StatusCode, resp.Header.Get("X-Rlnode-Decided")
	var body struct {
		ResetAt int64 `json:"resetAt"`
		Limits  []struct {
			WindowStart int64 `json:"windowStart"`
			ResetAt     int64 `json:"resetAt"`
		} `json:"limits"`
	}
	if json.Unmarshal(b, &body) == nil && len(body.Limits) > 0 {
		a.windowStart, a.resetAt = body.Limits[0].WindowStart, body.Limits[0].ResetAt
	}
	l.mu.Lock()
	l.ans = append(l.ans, a)
	l.mu.Unlock()
}

func (l *leaseLoad) halt() []leaseAnswer {
	close(l.stop)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ans
}

// checkFixedWindow verifies never-over-the-limit from the answers of a
// fixed-window key: per anchored window at most limit allowed, and no
// allowed answer to a request sent after its window had ended (units of a
// past window spent late: what a holder waking from a pause with a stale
// lease would do). slack is the clock tolerance between this process's
// wall clock and the cluster's (same host).
func checkFixedWindow(t *testing.T, ans []leaseAnswer, limit int64, slack time.Duration) (allowed, local int) {
	t.Helper()
	perWindow := map[int64]int64{}
	for _, a := range ans {
		if a.decided == "local" {
			local++
		}
		if a.status != 200 {
			continue
		}
		allowed++
		perWindow[a.windowStart]++
		if late := a.sent.UnixMilli() - a.resetAt; late > slack.Milliseconds() {
			t.Errorf("an allowed check sent %d ms after its window ended (window %d, reset %d, via %s, decided %s)",
				late, a.windowStart, a.resetAt, a.node, a.decided)
		}
	}
	for w, n := range perWindow {
		if n > limit {
			t.Errorf("window %d allowed %d, over the limit of %d", w, n, limit)
		}
	}
	return allowed, local
}

func leasedCluster(t *testing.T, yaml string) []*proctest.Node {
	file := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return proctest.StartCluster(t, rlnodeBin, 3, "--policies", file)
}

// TestLeasedHolderPausedPastItsLease: a follower holding grants is stopped
// (SIGSTOP) under load for longer than its lease and its window (the
// limit is above the load, so the holder holds unspent units); checks
// sent to it meanwhile queue in its sockets. After SIGCONT it must not
// answer them from the units it held: every allowed answer belongs to a
// window that had not ended when the check was sent, and no window allows
// more than its limit.
func TestLeasedHolderPausedPastItsLease(t *testing.T) {
	nodes := leasedCluster(t, `
policies:
  - name: lw
    algorithm: fixed_window
    consistency: leased
    limits: [{limit: 20000, window: 1s}]
`)
	leader := leaderOf(t, nodes)
	var holder *proctest.Node
	for _, n := range nodes {
		if n != leader {
			holder = n
			break
		}
	}
	load := startLeaseLoad(nodes, "/check/lw/hot", 3)
	// Wait until the holder decides locally: it holds a grant.
	proctest.Poll(t, 30*time.Second, func() error {
		r, err := proctest.Get(holder.URL() + "/check/lw/hot")
		if err != nil || r.Header.Get("X-Rlnode-Decided") != "local" {
			return fmt.Errorf("holder not deciding locally yet (%v)", err)
		}
		return nil
	})
	holder.Proc.Signal(syscall.SIGSTOP, 0)
	// Checks sent during the pause wait in the stopped node's sockets.
	paused := startLeaseLoad([]*proctest.Node{holder}, "/check/lw/hot", 16)
	time.Sleep(3 * time.Second) // the pause itself: longer than the 1 s window and the 2 s lease
	holder.Proc.Signal(syscall.SIGCONT, 0)
	proctest.Poll(t, 30*time.Second, func() error {
		if _, err := proctest.Get(holder.URL() + "/livez"); err != nil {
			return err
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond) // keep the load on after the wake-up
	ans := append(load.halt(), paused.halt()...)
	allowed, local := checkFixedWindow(t, ans, 20000, 50*time.Millisecond)
	t.Logf("%d checks, %d allowed, %d decided locally", len(ans), allowed, local)
	if local == 0 {
		t.Fatal("no check was decided locally")
	}
}

const leasedPolicies = `
policies:
  - name: lf
    algorithm: fixed_window
    consistency: leased
    limits: [{limit: 300, window: 1s}]
  - name: ls
    algorithm: sliding_window
    consistency: leased
    limits: [{limit: 300, window: 1s}]
  - name: lt
    algorithm: token_bucket
    consistency: leased
    limits: [{limit: 300, window: 1s, burst: 100}]
  - name: lr
    algorithm: fixed_window
    consistency: leased
    limits: [{limit: 100000, window: 1h}]
`

// runLoad puts load on path through nodes for d and returns the answers.
func runLoad(nodes []*proctest.Node, path string, d time.Duration) []leaseAnswer {
	l := startLeaseLoad(nodes, path, 2)
	time.Sleep(d)
	return l.halt()
}

// checkBucket verifies a token bucket key from the answers: allowed never
// exceeds burst + rate × the time the load ran (plus slack).
func checkBucket(t *testing.T, ans []leaseAnswer, burst, perSecond int64, slack time.Duration) (allowed int64) {
	t.Helper()
	if len(ans) == 0 {
		return 0
	}
	first, last := ans[0].sent, ans[0].sent
	for _, a := range ans {
		if a.status == 200 {
			allowed++
		}
		if a.sent.Before(first) {
			first = a.sent
		}
		if a.sent.After(last) {
			last = a.sent
		}
	}
	bound := burst + int64((last.Sub(first)+slack).Seconds()*float64(perSecond))
	if allowed > bound {
		t.Errorf("token bucket allowed %d, over burst + refill %d", allowed, bound)
	}
	return allowed
}

func liveLeader(t *testing.T, nodes []*proctest.Node, dead *proctest.Node) *proctest.Node {
	t.Helper()
	var live []*proctest.Node
	for _, n := range nodes {
		if n != dead {
			live = append(live, n)
		}
	}
	var leader *proctest.Node
	proctest.Poll(t, 20*time.Second, func() error {
		leader = leaderOf(t, live)
		if leader == dead || leader == nil {
			return fmt.Errorf("no new leader yet")
		}
		return nil
	})
	return leader
}

// TestLeasedPoliciesThroughTheBinary: a three-node cluster of real
// processes with a leased policy of each algorithm: hot keys are decided
// locally on every node and never over the limit; a cooled holder gives
// back what it did not spend; a lowered limit holds after one lease; a
// killed leader and a killed holder lose nothing but unused grants.
func TestLeasedPoliciesThroughTheBinary(t *testing.T) {
	nodes := leasedCluster(t, leasedPolicies)
	slack := 50 * time.Millisecond

	t.Run("each algorithm within its limit, decided locally", func(t *testing.T) {
		allowed, local := checkFixedWindow(t, runLoad(nodes, "/check/lf/hot", 2*time.Second), 300, slack)
		t.Logf("fixed: %d allowed, %d local", allowed, local)
		if local == 0 {
			t.Error("fixed window: nothing decided locally")
		}
		allowed, local = checkFixedWindow(t, runLoad(nodes, "/check/ls/hot", 2*time.Second), 300, slack)
		t.Logf("sliding: %d allowed, %d local", allowed, local)
		if local == 0 {
			t.Error("sliding window: nothing decided locally")
		}
		ans := runLoad(nodes, "/check/lt/hot", 2*time.Second)
		t.Logf("bucket: %d allowed", checkBucket(t, ans, 100, 300, slack))
		m := proctest.MustGet(t, leaderOf(t, nodes).URL()+"/metrics")
		for _, want := range []string{`rlnode_lease_local_decisions_total{policy="lf"}`, `rlnode_lease_granted_units_total{policy="lt"}`} {
			if !strings.Contains(string(m.Raw), want) {
				t.Errorf("/metrics has no %s", want)
			}
		}
	})

	t.Run("policy set --consistency leased", func(t *testing.T) {
		if _, stderr, code := proctest.Run(t, rlnodeBin, nil, "policy", "set", "cli", "--limit", "5", "--window", "1s",
			"--consistency", "leased", "--addr", nodes[1].URL()); code != 0 {
			t.Fatalf("policy set --consistency leased: exit %d: %s", code, stderr)
		}
		if r := proctest.MustGet(t, nodes[2].URL()+"/v1/policies/cli"); r.JSON["consistency"] != "leased" {
			t.Fatalf("policy get: %s", r.Raw)
		}
		if _, stderr, code := proctest.Run(t, rlnodeBin, nil, "policy", "set", "cli2", "--limit", "5", "--window", "1s",
			"--consistency", "eventual", "--addr", nodes[1].URL()); code != 2 || !strings.Contains(stderr, "consistency") {
			t.Fatalf("a bad --consistency: exit %d: %s", code, stderr)
		}
	})

	t.Run("a cooled holder returns what it did not spend", func(t *testing.T) {
		for range 60 {
			proctest.MustGet(t, nodes[1].URL()+"/check/lr/cool")
		}
		proctest.Poll(t, 15*time.Second, func() error {
			r, err := proctest.Get(nodes[0].URL() + "/v1/status/lr/cool")
			if err != nil {
				return err
			}
			if used := r.Num("used"); used != 60 {
				return fmt.Errorf("used %d, want 60 once the holder returned its unspent units", used)
			}
			return nil
		})
	})

	t.Run("a lowered limit holds within one lease", func(t *testing.T) {
		leader := leaderOf(t, nodes)
		load := startLeaseLoad(nodes, "/check/lf/change", 2)
		time.Sleep(time.Second)
		changed := time.Now()
		r := mustDo(t, "PUT", leader.URL()+"/v1/policies/lf", "", `{"algorithm":"fixed_window","consistency":"leased","limits":[{"limit":50,"window":"1s"}]}`)
		if r.Status/100 != 2 {
			t.Fatalf("lower the limit: %d %s", r.Status, r.Raw)
		}
		time.Sleep(3 * time.Second)
		ans := load.halt()
		var after []leaseAnswer
		for _, a := range ans {
			// Windows opened a lease (2 s) after the change are bound by the new limit.
			if a.windowStart > changed.Add(2*time.Second).UnixMilli() {
				after = append(after, a)
			}
		}
		allowed, _ := checkFixedWindow(t, after, 50, slack)
		t.Logf("after the change: %d allowed in %d answers", allowed, len(after))
		if len(after) == 0 {
			t.Error("no answers after the change")
		}
		mustDo(t, "PUT", leader.URL()+"/v1/policies/lf", "", `{"algorithm":"fixed_window","consistency":"leased","limits":[{"limit":300,"window":"1s"}]}`)
	})

	t.Run("a killed holder and a killed leader", func(t *testing.T) {
		leader := leaderOf(t, nodes)
		var holder *proctest.Node
		for _, n := range nodes {
			if n != leader {
				holder = n
			}
		}
		load := startLeaseLoad(nodes, "/check/lf/kill", 2)
		time.Sleep(time.Second)
		holder.Proc.Kill()
		time.Sleep(time.Second)
		holder.Proc.Restart()
		proctest.WaitReady(t, holder, 30*time.Second)
		leader.Proc.Kill()
		liveLeader(t, nodes, leader)
		time.Sleep(time.Second)
		leader.Proc.Restart()
		proctest.WaitReady(t, leader, 30*time.Second)
		time.Sleep(500 * time.Millisecond)
		allowed, local := checkFixedWindow(t, load.halt(), 300, slack)
		t.Logf("through both kills: %d allowed, %d local", allowed, local)
	})
}
