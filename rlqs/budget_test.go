package rlqs

import (
	"testing"
	"time"
)

// The node's grant-entry budget: the node writes at most its rate (plus
// one second's burst), and streams that all ask as fast as they can get
// even shares; a stream that asks rarely still gets its entry.
func TestGrantBudgetIsSharedEvenly(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	b := newGrantBudget(10)
	b.node.at = t0
	b.node.level = 10
	b.joinAt("greedy1", t0)
	b.joinAt("greedy2", t0)
	b.joinAt("quiet", t0)
	got := map[string]int{}
	for ms := 0; ms < 10_000; ms++ {
		now := t0.Add(time.Duration(ms) * time.Millisecond)
		for _, h := range []string{"greedy1", "greedy2"} {
			if b.takeAt(h, now) {
				got[h]++
			}
		}
		if ms%2000 == 0 && b.takeAt("quiet", now) {
			got["quiet"]++
		}
	}
	total := got["greedy1"] + got["greedy2"] + got["quiet"]
	if total > 10*10+10 {
		t.Fatalf("%d entries in 10 s at 10/s: %v", total, got)
	}
	if got["quiet"] != 5 {
		t.Fatalf("the quiet stream got %d of its 5 entries: %v", got["quiet"], got)
	}
	if d := got["greedy1"] - got["greedy2"]; d > 2 || d < -2 || got["greedy1"] < 25 {
		t.Fatalf("greedy streams got %v: want even shares of about a third of 100 each", got)
	}
	t.Logf("10 s at 10 entries/s: %v", got)
	b.leave("greedy2")
	b.leave("quiet")
	if b.takeAt("greedy2", t0.Add(20*time.Second)) {
		t.Fatal("a stream that left took an entry")
	}
}
