package window

import (
	"math/rand/v2"
	"testing"
)

func TestDecideTable(t *testing.T) {
	const w, limit = 60_000, 10
	cases := []struct {
		name                   string
		prevStart, prevCount   int64
		now, cost              int64
		want                   Outcome
		wantStart, wantCount   int64
		wantRemaining, wantRst int64
	}{
		{"never seen opens a window at now", 0, 0, 1_000_000, 1, Allowed, 1_000_000, 1, 9, 1_060_000},
		{"hit inside the window counts", 1_000_000, 3, 1_000_500, 1, Allowed, 1_000_000, 4, 6, 1_060_000},
		{"last allowed hit", 1_000_000, 9, 1_059_999, 1, Allowed, 1_000_000, 10, 0, 1_060_000},
		{"first refused hit is not counted", 1_000_000, 10, 1_059_999, 1, Refused, 1_000_000, 10, 0, 1_060_000},
		{"exactly windowMs later opens a fresh window", 1_000_000, 10, 1_060_000, 1, Allowed, 1_060_000, 1, 9, 1_120_000},
		{"one ms before the boundary is still the old window", 1_000_000, 10, 1_059_999, 1, Refused, 1_000_000, 10, 0, 1_060_000},
		{"long after the window opens a fresh one", 1_000_000, 7, 9_000_000, 1, Allowed, 9_000_000, 1, 9, 9_060_000},
		{"weighted cost fits exactly", 1_000_000, 7, 1_000_001, 3, Allowed, 1_000_000, 10, 0, 1_060_000},
		{"weighted cost one too many is refused", 1_000_000, 8, 1_000_001, 3, Refused, 1_000_000, 8, 2, 1_060_000},
		{"cost equal to limit on a fresh window", 0, 0, 5_000_000, 10, Allowed, 5_000_000, 10, 0, 5_060_000},
		{"cost above limit is never allowed", 0, 0, 5_000_000, 11, CostExceedsLimit, 5_000_000, 0, 10, 5_060_000},
		{"cost above limit inside a window", 1_000_000, 2, 1_000_001, 11, CostExceedsLimit, 1_000_000, 2, 8, 1_060_000},
		{"cost zero counts as one", 1_000_000, 2, 1_000_001, 0, Allowed, 1_000_000, 3, 7, 1_060_000},
		{"clock behind the window start stays in the window", 1_000_000, 2, 999_000, 1, Allowed, 1_000_000, 3, 7, 1_060_000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(c.prevStart, c.prevCount, c.now, w, limit, c.cost)
			if d.Outcome != c.want || d.WindowStart != c.wantStart || d.Count != c.wantCount ||
				d.Remaining != c.wantRemaining || d.ResetAt != c.wantRst {
				t.Fatalf("Decide(%d,%d,%d,%d,%d,%d) = %+v; want outcome %v start %d count %d remaining %d resetAt %d",
					c.prevStart, c.prevCount, c.now, w, limit, c.cost, d,
					c.want, c.wantStart, c.wantCount, c.wantRemaining, c.wantRst)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	d := Decide(1_000, 10, 1_500, 1_000, 10, 1)
	if d.Outcome != Refused || d.RetryAfterMs(1_500) != 500 {
		t.Fatalf("refused decision %+v retryAfter %d, want 500", d, d.RetryAfterMs(1_500))
	}
	if got := Decide(0, 0, 1_500_000, 1_000, 10, 1).RetryAfterMs(1_500_000); got != 0 {
		t.Fatalf("allowed hit has retryAfter %d, want 0", got)
	}
	if got := Decide(0, 0, 1_500_000, 1_000, 10, 11).RetryAfterMs(1_500_000); got != 0 {
		t.Fatalf("never-allowed hit has retryAfter %d, want 0 (retrying is pointless)", got)
	}
}

// checkInvariants is shared by the property test and the fuzz target.
func checkInvariants(t *testing.T, prevStart, prevCount, now, windowMs, limit, cost int64) {
	t.Helper()
	d := Decide(prevStart, prevCount, now, windowMs, limit, cost)
	if d.Count < 0 || d.Count > limit {
		t.Fatalf("count %d outside [0,%d]: %+v", d.Count, limit, d)
	}
	if d.Remaining != limit-d.Count {
		t.Fatalf("remaining %d != limit %d - count %d", d.Remaining, limit, d.Count)
	}
	switch d.Outcome {
	case Allowed:
		if d.ResetAt <= now {
			t.Fatalf("allowed hit at %d resets at %d, not in the future", now, d.ResetAt)
		}
		if d.WindowStart != prevStart && d.WindowStart != now {
			t.Fatalf("allowed hit moved the window to %d (prev %d, now %d)", d.WindowStart, prevStart, now)
		}
	case Refused, CostExceedsLimit:
		fresh := now-prevStart >= windowMs
		if !fresh && (d.WindowStart != prevStart || d.Count != prevCount) {
			t.Fatalf("refused hit changed the window: prev (%d,%d) -> %+v", prevStart, prevCount, d)
		}
		if d.Outcome == Refused && fresh {
			t.Fatalf("a cost-%d hit was refused in a fresh window: %+v", cost, d)
		}
	default:
		t.Fatalf("unknown outcome %v", d.Outcome)
	}
	if c := max(cost, 1); c > limit && d.Outcome != CostExceedsLimit {
		t.Fatalf("cost %d > limit %d gave %v", c, limit, d.Outcome)
	}
}

func TestDecideProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200_000; i++ {
		windowMs := 1 + r.Int64N(120_000)
		limit := 1 + r.Int64N(50)
		prevStart := r.Int64N(2_000_000_000_000)
		prevCount := r.Int64N(limit + 1)
		now := prevStart + r.Int64N(3*windowMs) - windowMs/4
		cost := r.Int64N(limit + 3)
		checkInvariants(t, prevStart, prevCount, now, windowMs, limit, cost)
	}
}

// TestDecideSequence drives one key through many hits the way the FSM does
// (store only allowed decisions) and checks nobody gets more than limit per
// window.
func TestDecideSequence(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const windowMs, limit = 1_000, 5
	var start, count int64
	allowedIn := map[int64]int64{}
	now := int64(1_700_000_000_000)
	for i := 0; i < 100_000; i++ {
		now += r.Int64N(60)
		d := Decide(start, count, now, windowMs, limit, 1)
		if d.Allowed() {
			start, count = d.WindowStart, d.Count
			allowedIn[start]++
			if allowedIn[start] > limit {
				t.Fatalf("window %d admitted %d hits, limit %d", start, allowedIn[start], limit)
			}
		}
	}
}

func FuzzDecide(f *testing.F) {
	f.Add(int64(0), int64(0), int64(1_000), int64(60_000), int64(10), int64(1))
	f.Add(int64(1_000), int64(10), int64(60_999), int64(60_000), int64(10), int64(1))
	f.Add(int64(1_000), int64(3), int64(61_000), int64(60_000), int64(10), int64(11))
	f.Fuzz(func(t *testing.T, prevStart, prevCount, now, windowMs, limit, cost int64) {
		// Mirror what the FSM validates before anything reaches Decide.
		if windowMs < 1 || windowMs > 1<<40 || limit < 1 || limit > 1<<40 || cost > 1<<40 {
			t.Skip()
		}
		if prevStart < 0 || prevStart > 1<<50 || now < 0 || now > 1<<50 || prevCount < 0 || prevCount > limit {
			t.Skip()
		}
		checkInvariants(t, prevStart, prevCount, now, windowMs, limit, cost)
	})
}
