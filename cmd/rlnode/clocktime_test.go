package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// Reproduction 2 of issue 34 on real processes: a follower's wall clock is
// stepped 20 s ahead (then, in a second round, 20 s behind) with the
// testing hook and handed the leadership (a transfer, refused by the
// leader), then its clock is stepped again the moment the leader is
// killed, until the skewed node wins or the clock guard keeps it out. Hits flow all along. Cluster time (appliedNow of the
// leader's GET /v1/status) must stay within 1 s of real time, and after
// the heal (the clock set right again) it must keep running: at least
// 2.4 s per 3 s of real time, never standing still.
func TestFarClockFollowerNeverMovesClusterTime(t *testing.T) {
	proctest.Long(t)
	nodes := proctest.StartCluster(t, rlnodeBin, 3, "--debug-endpoints", "--limit", "1000000", "--window", "1s")
	var down sync.Map // *proctest.Node -> true while killed
	alive := func() []*proctest.Node {
		var out []*proctest.Node
		for _, n := range nodes {
			if _, d := down.Load(n); !d {
				out = append(out, n)
			}
		}
		return out
	}
	ctx, cancel := context.WithCancel(context.Background())
	var hits, ok atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // hits flow through every live node
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			live := alive()
			if len(live) == 0 {
				continue
			}
			r, err := live[i%len(live)].Do("GET", fmt.Sprintf("/check/flow-%d", i%50), "", nil)
			hits.Add(1)
			if err == nil && r.Status == 200 {
				ok.Add(1)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	defer func() { cancel(); wg.Wait() }()

	// aheadOfReal is appliedNow minus real time on the node that leads
	// (read from its status), and whether a leader answered.
	aheadOfReal := func() (int64, *proctest.Node, bool) {
		for _, n := range alive() {
			st, err := proctest.Status(n)
			if err != nil || st["state"] != "Leader" {
				continue
			}
			before := time.Now().UnixMilli()
			if st2, err := proctest.Status(n); err == nil {
				st = st2
			}
			return int64(st["appliedNow"].(float64)) - before, n, true
		}
		return 0, nil, false
	}
	// watch checks cluster time for d: never more than 1 s ahead of real
	// time, and no more than 1 s behind while a leader serves hits.
	watch := func(d time.Duration, what string) {
		t.Helper()
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			okBefore := ok.Load()
			time.Sleep(60 * time.Millisecond)
			flowing := ok.Load() >= okBefore+2 // so appliedNow is a recent entry's
			ahead, leader, found := aheadOfReal()
			if !found {
				continue
			}
			if ahead > 1000 {
				t.Fatalf("%s: cluster time is %d ms ahead of real time on %s", what, ahead, leader.ID)
			}
			if flowing && ahead < -1000 {
				t.Fatalf("%s: cluster time is %d ms behind real time on %s while hits are served", what, -ahead, leader.ID)
			}
		}
	}
	setClock := func(n *proctest.Node, off time.Duration) {
		t.Helper()
		if r, err := proctest.Do("POST", n.URL()+"/debug/clock-offset", "", map[string]int64{"offsetMs": off.Milliseconds()}); err != nil || r.Status != 200 {
			t.Fatalf("set %s's clock: %v %+v", n.ID, err, r)
		}
	}

	for _, off := range []time.Duration{20 * time.Second, -20 * time.Second} {
		leader := leaderOf(t, alive())
		var skewed *proctest.Node
		for _, n := range alive() {
			if n != leader {
				skewed = n
				break
			}
		}
		t.Logf("%s: %s's clock steps %s and it is handed the leadership", off, skewed.ID, off)
		setClock(skewed, off)
		r, err := proctest.Do("POST", leader.URL()+"/v1/cluster/transfer-leadership", "", map[string]string{"id": skewed.ID})
		t.Logf("transfer to %s: %v %d %s", skewed.ID, err, r.Status, r.Raw)
		watch(3*time.Second, fmt.Sprintf("%s after the transfer", off))
		// Kill the leader the moment the clock steps (before the next
		// clock reading): the skewed node races the healthy one for the
		// lead. Up to four tries, until it wins or the guard refuses it.
		won := false
		for try := range 4 {
			setClock(skewed, 0)
			time.Sleep(2 * time.Second) // readings from before the step
			_, leader, found := aheadOfReal()
			if !found || leader == skewed {
				continue
			}
			setClock(skewed, off)
			leader.Kill()
			down.Store(leader, true)
			for end := time.Now().Add(4 * time.Second); time.Now().Before(end) && !won; time.Sleep(50 * time.Millisecond) {
				st, err := proctest.Status(skewed)
				won = err == nil && st["state"] == "Leader"
			}
			watch(2*time.Second, fmt.Sprintf("%s try %d after killing %s", off, try, leader.ID))
			leader.Restart()
			proctest.WaitReady(t, leader, 20*time.Second)
			down.Delete(leader)
			watch(time.Second, fmt.Sprintf("%s try %d after %s returned", off, try, leader.ID))
			if won {
				t.Logf("%s: the skewed node %s won the election on try %d", off, skewed.ID, try)
				break
			}
		}
		// The heal: the clock is right again. Cluster time runs on.
		setClock(skewed, 0)
		proctest.Poll(t, 20*time.Second, func() error {
			if r, err := alive()[0].Do("GET", "/check/heal", "", nil); err != nil || r.Status != 200 {
				return fmt.Errorf("no hit served after the heal: %v %d", err, r.Status)
			}
			return nil
		})
		for round := range 3 {
			_, l0, found := aheadOfReal()
			if !found {
				t.Fatalf("%s: no leader after the heal", off)
			}
			st0, _ := proctest.Status(l0)
			real0 := time.Now()
			time.Sleep(3 * time.Second)
			st1, err := proctest.Status(l0)
			if err != nil {
				t.Fatal(err)
			}
			ran := int64(st1["appliedNow"].(float64) - st0["appliedNow"].(float64))
			t.Logf("%s heal round %d: cluster time ran %d ms in %s (leader %s)", off, round, ran, time.Since(real0).Round(time.Millisecond), l0.ID)
			if ran < 2400 {
				t.Fatalf("%s: after the heal cluster time ran %d ms in 3 s of real time; want at least 2,400 (it stands still)", off, ran)
			}
		}
		watch(time.Second, fmt.Sprintf("%s after the heal", off))
	}
	t.Logf("%d hits, %d served", hits.Load(), ok.Load())
}
