package topkeys

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable now for a Recorder.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// settle waits until the owner goroutine has counted what was recorded.
func settle(t *testing.T, r *Recorder) {
	t.Helper()
	for i := 0; len(r.ch) > 0 && i < 1000; i++ {
		time.Sleep(time.Millisecond)
	}
	r.mu.Lock() // the drain holding the lock has finished once we get it
	r.mu.Unlock()
}

// TestHistoryKeepsTheLastStepsPerPolicy: hits are kept per policy and
// outcome in aligned steps, one point per step (zeros included) over the
// last HistorySteps steps; older steps fall off; two nodes' histories
// add up step by step.
func TestHistoryKeepsTheLastStepsPerPolicy(t *testing.T) {
	clk := &fakeClock{t: time.UnixMilli(1_800_000_000_000)}
	r := newRecorder(Config{HistoryStep: time.Second, HistorySteps: 4}, clk.now)
	defer r.Close()
	hit := func(policy string, o Outcome, n int) {
		for range n {
			r.Record(policy, "c", o)
		}
		settle(t, r)
	}
	hit("login", Refused, 3)
	hit("login", Allowed, 2)
	clk.add(2 * time.Second) // one step with nothing in between
	hit("login", Allowed, 1)
	hit("feed", Allowed, 5)
	h := r.History("")
	if len(h) != 2 || h[0].Policy != "feed" || h[1].Policy != "login" {
		t.Fatalf("history: %+v", h)
	}
	login := h[1]
	if login.StepMs != 1000 || len(login.Points) != 4 {
		t.Fatalf("login: step %d, %d points; want 1000, 4", login.StepMs, len(login.Points))
	}
	want := []Point{{T: 1_799_999_999_000}, {T: 1_800_000_000_000, Allowed: 2, Refused: 3}, {T: 1_800_000_001_000}, {T: 1_800_000_002_000, Allowed: 1}}
	for i, p := range login.Points {
		if p != want[i] {
			t.Fatalf("login point %d: %+v, want %+v", i, p, want[i])
		}
	}
	if got := r.History("feed"); len(got) != 1 || got[0].Points[3].Allowed != 5 {
		t.Fatalf("History(feed): %+v", got)
	}
	clk.add(3 * time.Second) // the first step falls off
	if got := r.History("login"); got[0].Points[0].T != 1_800_000_002_000 || got[0].Points[0].Allowed != 1 {
		t.Fatalf("after 3 more steps, login starts %+v", got[0].Points[0])
	}
	other := []PolicyHistory{{Policy: "login", StepMs: 1000, Points: []Point{{T: 1_800_000_002_000, Allowed: 10, Refused: 1}}}}
	m := MergeHistories(r.History(""), other)
	for _, p := range m {
		if p.Policy == "login" && p.Points[0] != (Point{T: 1_800_000_002_000, Allowed: 11, Refused: 1}) {
			t.Fatalf("merged login: %+v", p.Points)
		}
	}
}

// TestHistoryIsBounded: a flood of policies keeps at most HistoryPolicies
// per step and HistorySteps steps; the rest is counted as dropped.
func TestHistoryIsBounded(t *testing.T) {
	clk := &fakeClock{t: time.UnixMilli(1_800_000_000_000)}
	r := newRecorder(Config{HistoryStep: time.Second, HistorySteps: 3, HistoryPolicies: 8}, clk.now)
	defer r.Close()
	for step := range 10 {
		for i := range 100 {
			r.Record(fmt.Sprintf("p%d-%d", step, i), "c", Allowed)
		}
		settle(t, r)
		clk.add(time.Second)
	}
	r.mu.Lock()
	kept := 0
	for _, s := range r.hist {
		kept += len(s.counts)
	}
	steps := len(r.hist)
	r.mu.Unlock()
	if steps != 3 || kept > 3*8 {
		t.Fatalf("history holds %d steps, %d policy counters; want 3 and at most 24", steps, kept)
	}
	if got := len(r.History("")); got > 3*8 {
		t.Fatalf("History lists %d policies", got)
	}
	r.mu.Lock()
	dropped := r.histDropped
	r.mu.Unlock()
	if dropped != 10*(100-8) || r.dropped.Load() != 0 {
		t.Fatalf("history dropped %d, keys dropped %d; want the %d hits past the bound counted apart", dropped, r.dropped.Load(), 10*(100-8))
	}
}
