package lease

import (
	"testing"
	"time"
)

// A key is hot after threshold hits within the current and the previous
// period; older hits are forgotten.
func TestTrackerCountsTwoPeriods(t *testing.T) {
	clk := newFakeClock()
	tr := NewTracker[string](4, time.Second, 10, clk.Now())
	for i := range 3 {
		if tr.Hit("k", clk.Now()) {
			t.Fatalf("hot after %d hits", i+1)
		}
	}
	clk.both(time.Second) // the three move to the previous period
	if !tr.Hit("k", clk.Now()) {
		t.Fatal("not hot after 4 hits in two periods")
	}
	clk.both(2 * time.Second)
	if tr.Hit("k", clk.Now()) {
		t.Fatal("hot on one hit after two idle periods")
	}
}

func TestTrackerBoundsItsKeys(t *testing.T) {
	clk := newFakeClock()
	tr := NewTracker[int](1, time.Second, 2, clk.Now())
	tr.Hit(1, clk.Now())
	tr.Hit(2, clk.Now())
	if tr.Hit(3, clk.Now()) {
		t.Fatal("a key past maxKeys was counted")
	}
	if !tr.Hit(1, clk.Now()) {
		t.Fatal("a tracked key stopped counting at maxKeys")
	}
}

// The threshold falls as the commit path gets busier, never under warm.
func TestThresholdFallsWithTheLoadOnTheLog(t *testing.T) {
	for _, c := range []struct {
		logRate float64
		want    int
	}{{0, 20}, {2000, 20}, {4000, 10}, {20000, 2}, {1e9, 2}} {
		if got := Threshold(20, 2, c.logRate, 2000); got != c.want {
			t.Errorf("Threshold at %v hits/s through the log: %d, want %d", c.logRate, got, c.want)
		}
	}
}
