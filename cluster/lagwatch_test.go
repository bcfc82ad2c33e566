package cluster

import (
	"strings"
	"testing"
	"time"
)

// A follower is too far behind only after FollowerLagGrace of being more
// than MaxFollowerLag entries behind; one comparison within the lag clears
// it.
func TestLagWatch(t *testing.T) {
	var w lagWatch
	t0 := time.Unix(1_700_000_000, 0)
	w.observe(t0, 1000+MaxFollowerLag, 1000)
	if err := w.tooFar(t0.Add(time.Hour)); err != nil {
		t.Fatalf("within the lag: %v", err)
	}
	w.observe(t0, 2000, 1000)
	w.observe(t0.Add(FollowerLagGrace/2), 2100, 1050)
	if err := w.tooFar(t0.Add(FollowerLagGrace / 2)); err != nil {
		t.Fatalf("behind for less than the grace: %v", err)
	}
	err := w.tooFar(t0.Add(FollowerLagGrace))
	if err == nil || !strings.Contains(err.Error(), "1050 entries behind") {
		t.Fatalf("behind for the grace: %v", err)
	}
	w.observe(t0.Add(FollowerLagGrace), 2100, 2100)
	if err := w.tooFar(t0.Add(2 * FollowerLagGrace)); err != nil {
		t.Fatalf("caught up: %v", err)
	}
}
