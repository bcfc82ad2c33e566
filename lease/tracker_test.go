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

// The rules an Envoy stream takes from the core: a lease of its reported
// rate, renewal in the last third, a recheck bounded by the lease.
func TestEnvoyRules(t *testing.T) {
	c := EnvoyConfig(2*time.Second, 1000)
	if got := c.Size(0, 0); got != 1 {
		t.Errorf("size at no demand: %d, want 1", got)
	}
	if got := c.Size(100, 0); got != 200 {
		t.Errorf("size at 100/s: %d, want 200 (a 2 s lease of it)", got)
	}
	if got := c.Size(1e9, 0); got != 1000 {
		t.Errorf("size at 1e9/s: %d, want the cap 1000", got)
	}
	if got := c.RenewIn(3 * time.Second); got != 2*time.Second {
		t.Errorf("renew a 3s assignment in %s, want 2s", got)
	}
	if got := c.RecheckIn(time.Hour); got != 2*time.Second {
		t.Errorf("recheck a window an hour from room in %s, want the lease", got)
	}
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
}
