package window

import (
	"math/rand/v2"
	"testing"
)

func TestSlidingWindowTable(t *testing.T) {
	const w = 1_000
	const t0 = 1_700_000_000_000 // aligned: a multiple of w
	cases := []struct {
		name      string
		limit     int64
		s         State
		now, cost int64
		want      Outcome
		wantState State // for Allowed only
		remaining int64
		resetAt   int64
		retry     int64
	}{
		{"new key opens the aligned window", 3, State{}, t0 + 250, 1, Allowed, State{t0, 1, 0}, 2, t0 + 2*w, 0},
		{"new key takes the whole limit", 3, State{}, t0 + 999, 3, Allowed, State{t0, 3, 0}, 0, t0 + 2*w, 0},
		{"cost above the limit is never allowed", 3, State{}, t0, 4, CostExceedsLimit, State{}, 3, t0, -1},
		// prev=3 weighs 3*(w-e)/w; cur=1 and cost 1 leave room for 1:
		// 3*(1000-e) <= 1000 first holds at e = 667 (999), not at 666 (1002).
		// Rounding the estimate 1 + 3*334/1000 = 2.002 down would let this
		// one extra hit through.
		{"boundary: one ms too early is refused", 3, State{t0, 1, 3}, t0 + 666, 1, Refused, State{}, 0, t0 + 2*w, 1},
		{"boundary: exactly on it is allowed", 3, State{t0, 1, 3}, t0 + 667, 1, Allowed, State{t0, 2, 3}, 0, t0 + 2*w, 0},
		{"refused at the window start waits for the previous weight to shrink", 3, State{t0, 1, 3}, t0, 1, Refused, State{}, 0, t0 + 2*w, 667},
		{"previous window becomes the weight", 10, State{t0 - w, 10, 4}, t0 + 500, 1, Allowed, State{t0, 1, 10}, 4, t0 + 2*w, 0},
		{"previous window at half weight, exactly full", 10, State{t0 - w, 10, 0}, t0 + 500, 5, Allowed, State{t0, 5, 10}, 0, t0 + 2*w, 0},
		{"previous window at half weight, one over", 10, State{t0 - w, 10, 0}, t0 + 500, 6, Refused, State{}, 5, t0 + w, 100},
		{"two windows back counts nothing", 10, State{t0 - 2*w, 10, 10}, t0, 10, Allowed, State{t0, 10, 0}, 0, t0 + 2*w, 0},
		// cur=3 fills limit 3: the next window needs 3*(w-e2) <= 2*w,
		// e2 >= 1000 - 666 = 334 (1998 <= 2000; at 333, 2001 > 2000).
		{"full window waits into the next one", 3, State{t0, 3, 0}, t0 + 100, 1, Refused, State{}, 0, t0 + 2*w, w - 100 + 334},
		// limit 1 spent: the next window still weighs 1*(w-e2)/w > 0 until
		// its end, so the wait runs to the start of the one after.
		{"limit 1 waits two window starts", 1, State{t0, 1, 0}, t0 + 10, 1, Refused, State{}, 0, t0 + 2*w, 2*w - 10},
		// cur=5 over a lowered limit 2: the next window needs 5*(w-e2) <= 1*w.
		{"a lowered limit refuses until there is room", 2, State{t0, 5, 0}, t0 + 10, 1, Refused, State{}, 0, t0 + 2*w, w - 10 + 800},
		{"only the previous window left: reset at this window's end", 5, State{t0 - w, 1, 0}, t0 + 10, 5, Refused, State{}, 4, t0 + w, w - 10},
		{"cost 0 counts as 1", 3, State{t0, 1, 0}, t0 + 1, 0, Allowed, State{t0, 2, 0}, 1, t0 + 2*w, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := Limit{Limit: c.limit, WindowMs: w}
			r, ns := checkApply(t, SlidingWindow, l, c.s, c.now, c.cost, true)
			if c.want != Allowed {
				c.wantState = c.s
			}
			if r.Outcome != c.want || ns != c.wantState || r.Remaining != c.remaining ||
				r.ResetAt != c.resetAt || r.RetryAfterMs != c.retry || r.WindowStart != c.now-c.now%w ||
				r.Limit != c.limit || r.WindowMs != w {
				t.Fatalf("got %+v state %+v; want %v state %+v remaining %d resetAt %d retry %d",
					r, ns, c.want, c.wantState, c.remaining, c.resetAt, c.retry)
			}
		})
	}
}

// TestSlidingWindowLargeValues: limit 2^40 over 366 days needs products
// beyond 64 bits; the boundary is still exact.
func TestSlidingWindowLargeValues(t *testing.T) {
	const w = 366 * 24 * 3_600_000
	const limit = 1 << 40
	l := Limit{Limit: limit, WindowMs: w}
	start := int64(4) * w
	// prev = limit weighs limit*(w-e)/w; with cur = 0 a hit of cost c fits
	// when limit*(w-e) <= (limit-c)*w, i.e. e >= c*w/limit.
	s := State{A: start - w, B: limit}
	cost := int64(1 << 20)
	edge := (cost*w + limit - 1) / limit // ceil(c*w/limit); exact in int64 here
	if r, _ := checkApply(t, SlidingWindow, l, s, start+edge-1, cost, true); r.Outcome != Refused || r.RetryAfterMs != 1 {
		t.Fatalf("one ms before the edge: %+v", r)
	}
	if r, _ := checkApply(t, SlidingWindow, l, s, start+edge, cost, true); r.Outcome != Allowed {
		t.Fatalf("on the edge: %+v", r)
	}
	// Huge stored counts (a corrupted or much lowered state) never wrap.
	for _, s := range []State{{start, 1<<63 - 1, 1<<63 - 1}, {start - w, 1<<63 - 1, -5}, {-1, -1, -1}, {1<<63 - 1, 1<<63 - 1, 1<<63 - 1}} {
		r, _ := checkApply(t, SlidingWindow, l, s, start+w/2, 1, false)
		if r.Outcome == Allowed && s.B > limit {
			t.Fatalf("state %+v allowed a hit: %+v", s, r)
		}
	}
}

// TestSlidingWindowMatchesOracle drives random keys with random limits,
// windows, gaps and costs against the exact rational definition, checking
// every field of every decision, the single-decision invariants and that no
// aligned window ever admits more than the limit.
func TestSlidingWindowMatchesOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	runs := 300
	if testing.Short() {
		runs = 30
	}
	for run := 0; run < runs; run++ {
		w := 1 + r.Int64N(200)
		limit := 1 + r.Int64N(12)
		l := Limit{Limit: limit, WindowMs: w}
		o := newSlidingOracle(limit, w)
		var s State
		now := r.Int64N(10 * w)
		for i := 0; i < 300; i++ {
			now += r.Int64N(w/4 + 2)
			cost := r.Int64N(limit + 2)
			res, ns := checkApply(t, SlidingWindow, l, s, now, cost, true)
			out, rem, reset, retry := o.hit(now, max(cost, 1))
			if res.Outcome != out || res.Remaining != rem || res.ResetAt != reset || res.RetryAfterMs != retry {
				t.Fatalf("run %d hit %d (limit %d, window %d, state %+v, now %d, cost %d): got %+v; oracle %v remaining %d resetAt %d retry %d",
					run, i, limit, w, s, now, cost, res, out, rem, reset, retry)
			}
			s = ns
			if c := o.counts[now/w]; c > limit {
				t.Fatalf("aligned window %d admitted %d, limit %d", now/w, c, limit)
			}
		}
	}
}

// FuzzSlidingWindow checks that no input panics and that every decision
// keeps the invariants of checkApply. Arbitrary states are checked for
// everything but retryAfter exactness; their canonical form (start aligned
// and not after now, which is all Apply ever stores) for that too.
func FuzzSlidingWindow(f *testing.F) {
	f.Add(int64(3), int64(1000), int64(1_700_000_000_000), int64(1), int64(3), int64(1_700_000_000_666), int64(1))
	f.Add(int64(1), int64(1), int64(0), int64(0), int64(0), int64(0), int64(0))
	f.Add(int64(1<<40), int64(366*86_400_000), int64(1<<62), int64(-1), int64(1<<62), int64(1<<63-1), int64(1<<40))
	f.Add(int64(-1), int64(-1), int64(-1<<63), int64(-1<<63), int64(-1<<63), int64(-1<<63), int64(-1<<63))
	f.Fuzz(func(t *testing.T, limit, w, a, b, c, now, cost int64) {
		l := Limit{Limit: limit, WindowMs: w}
		s := State{A: a, B: b, C: c}
		checkApply(t, SlidingWindow, l, s, now, cost, false)
		if w < 1 || limit < 1 {
			return
		}
		ww := min(w, MaxTime)
		s.A = min(alignDown(a, ww), alignDown(now, ww))
		checkApply(t, SlidingWindow, l, s, now, cost, true)

		// Folded: a limit up to 50 over up to 10 s, a state of this
		// window or the one before.
		l = Limit{Limit: 1 + small(limit, 50), WindowMs: 1 + small(w, 10_000)}
		now = 1<<40 + small(now, 1<<40)
		s = State{A: alignDown(now, l.WindowMs) - small(a, 2)*l.WindowMs, B: small(b, 60), C: small(c, 60)}
		checkApply(t, SlidingWindow, l, s, now, small(cost, 55), true)
	})
}
