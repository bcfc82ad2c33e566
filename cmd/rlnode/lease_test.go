package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
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
