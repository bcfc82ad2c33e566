package lease

import (
	"testing"
	"time"
)

// A grant cut at its window's end keeps the clock-offset allowance there
// (a leader of an earlier release moves cluster time to its own clock at
// a failover, ending the window up to --max-clock-offset early in real
// time); one whose lease ends well before the window pays only the margin.
func TestUsableForKeepsTheClockAllowanceAtTheWindowEnd(t *testing.T) {
	const off = 500 * time.Millisecond
	cases := []struct {
		name               string
		valid, toWindowEnd time.Duration
		bucket             bool
		want               time.Duration
	}{
		{"lease ends long before the window", 2 * time.Second, time.Minute, false, 2*time.Second - 3*time.Millisecond - MarginFixed},
		{"cut at the window's end", 2 * time.Second, 2 * time.Second, false, 2*time.Second - 3*time.Millisecond - MarginFixed - off},
		{"lease ends just before the window", 2 * time.Second, 2100 * time.Millisecond, false, 2100*time.Millisecond - 3150*time.Microsecond - MarginFixed - off},
		{"token bucket", 2 * time.Second, 0, true, 2*time.Second - 3*time.Millisecond - MarginFixed - off},
		{"window ends within the allowance", 300 * time.Millisecond, 300 * time.Millisecond, false, 300*time.Millisecond - 450*time.Microsecond - MarginFixed - off},
	}
	for _, c := range cases {
		if got := UsableFor(c.valid, c.bucket, c.toWindowEnd, off); got != c.want {
			t.Errorf("%s: usable for %s, want %s", c.name, got, c.want)
		}
	}
}
