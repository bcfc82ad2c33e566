package window

import (
	"math/rand/v2"
	"testing"
)

func TestFixedWindowApply(t *testing.T) {
	const w, t0 = 60_000, 1_000_000
	l := Limit{Limit: 10, WindowMs: w}
	cases := []struct {
		name      string
		s         State
		now, cost int64
		want      Outcome
		wantState State // for Allowed only
		remaining int64
		resetAt   int64
		retry     int64
		start     int64
	}{
		{"never seen opens a window at now", State{}, t0, 1, Allowed, State{t0, 1, 0}, 9, t0 + w, 0, t0},
		{"last allowed hit", State{t0, 9, 0}, t0 + w - 1, 1, Allowed, State{t0, 10, 0}, 0, t0 + w, 0, t0},
		{"refused waits exactly until the window lapses", State{t0, 10, 0}, t0 + 500, 1, Refused, State{}, 0, t0 + w, w - 500, t0},
		{"refused 1 ms before the boundary", State{t0, 10, 0}, t0 + w - 1, 1, Refused, State{}, 0, t0 + w, 1, t0},
		{"exactly windowMs later opens a fresh window", State{t0, 10, 0}, t0 + w, 1, Allowed, State{t0 + w, 1, 0}, 9, t0 + 2*w, 0, t0 + w},
		{"cost above limit is never allowed", State{t0, 2, 0}, t0 + 1, 11, CostExceedsLimit, State{}, 8, t0 + w, -1, t0},
		{"a lowered limit refuses until the window lapses", State{t0, 25, 0}, t0 + 1, 1, Refused, State{}, 0, t0 + w, w - 1, t0},
		{"a clock behind the start waits for start + window", State{t0, 10, 0}, t0 - 1_000, 1, Refused, State{}, 0, t0 + w, w + 1_000, t0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, ns := checkApply(t, FixedWindow, l, c.s, c.now, c.cost, true)
			if c.want != Allowed {
				c.wantState = c.s
			}
			if r.Outcome != c.want || ns != c.wantState || r.Remaining != c.remaining || r.ResetAt != c.resetAt ||
				r.RetryAfterMs != c.retry || r.WindowStart != c.start || r.Limit != 10 || r.WindowMs != w {
				t.Fatalf("got %+v state %+v; want %v state %+v remaining %d resetAt %d retry %d start %d",
					r, ns, c.want, c.wantState, c.remaining, c.resetAt, c.retry, c.start)
			}
		})
	}
}

// TestFixedWindowApplyIsDecide drives random keys through Apply and Decide
// side by side: same outcome, window, count, remaining and reset, the
// single-decision invariants (retryAfter exactness included), and never
// more than limit in one anchored window.
func TestFixedWindowApplyIsDecide(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	for run := 0; run < 200; run++ {
		w := 1 + r.Int64N(1_000)
		limit := 1 + r.Int64N(10)
		l := Limit{Limit: limit, WindowMs: w}
		var s State
		now := r.Int64N(1 << 41)
		for i := 0; i < 300; i++ {
			now += r.Int64N(w/3 + 1)
			cost := r.Int64N(limit + 2)
			d := Decide(s.A, s.B, now, w, limit, cost)
			res, ns := checkApply(t, FixedWindow, l, s, now, cost, true)
			if res.Outcome != d.Outcome || res.WindowStart != d.WindowStart || res.Remaining != d.Remaining || res.ResetAt != d.ResetAt {
				t.Fatalf("Apply %+v, Decide %+v", res, d)
			}
			if res.Outcome == Allowed && (ns != State{A: d.WindowStart, B: d.Count}) {
				t.Fatalf("Apply stored %+v, Decide %+v", ns, d)
			}
			if ns.B > limit {
				t.Fatalf("window %d holds %d, limit %d", ns.A, ns.B, limit)
			}
			s = ns
		}
	}
}

// FuzzFixedWindow: no input panics or wraps, and the invariants hold;
// retryAfter exactness for stored states not after now (a monotonic clock).
func FuzzFixedWindow(f *testing.F) {
	f.Add(int64(10), int64(60_000), int64(1_000), int64(10), int64(1_500), int64(1))
	f.Add(int64(-1), int64(-1), int64(-1<<63), int64(-1<<63), int64(-1<<63), int64(-1<<63))
	f.Add(int64(1<<63-1), int64(1<<63-1), int64(1<<63-1), int64(1<<63-1), int64(1<<63-1), int64(1<<63-1))
	f.Fuzz(func(t *testing.T, limit, w, a, b, now, cost int64) {
		l := Limit{Limit: limit, WindowMs: w}
		s := State{A: a, B: b}
		checkApply(t, FixedWindow, l, s, now, cost, a >= 0 && a <= clampTime(now))

		// Folded: a limit up to 50 over up to 10 s, a window started up to
		// two windows ago.
		l = Limit{Limit: 1 + small(limit, 50), WindowMs: 1 + small(w, 10_000)}
		now = 1<<40 + small(now, 1<<40)
		s = State{A: now - small(a, 2*l.WindowMs), B: small(b, 60)}
		checkApply(t, FixedWindow, l, s, now, small(cost, 55), true)
	})
}
