package window

import (
	"math/rand/v2"
	"testing"
)

func TestFixedWindowEpochTable(t *testing.T) {
	const w = 60_000
	const k0 = 1_700_000_000_000 / w * w // an aligned minute
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
		{"never seen counts in the minute now falls in", State{}, k0 + 45_000, 1, Allowed, State{k0, 1, 0}, 9, k0 + w, 0, k0},
		{"same minute adds up", State{k0, 3, 0}, k0 + 59_999, 2, Allowed, State{k0, 5, 0}, 5, k0 + w, 0, k0},
		{"the minute's last hit", State{k0, 9, 0}, k0 + 1, 1, Allowed, State{k0, 10, 0}, 0, k0 + w, 0, k0},
		{"refused until the minute ends", State{k0, 10, 0}, k0 + 45_000, 1, Refused, State{}, 0, k0 + w, 15_000, k0},
		{"refused 1 ms before the boundary", State{k0, 10, 0}, k0 + w - 1, 1, Refused, State{}, 0, k0 + w, 1, k0},
		{"the next minute starts empty on the boundary", State{k0, 10, 0}, k0 + w, 1, Allowed, State{k0 + w, 1, 0}, 9, k0 + 2*w, 0, k0 + w},
		{"an older minute is forgotten", State{k0 - 5*w, 10, 0}, k0 + 1, 1, Allowed, State{k0, 1, 0}, 9, k0 + w, 0, k0},
		{"an anchored start is read aligned down", State{k0 + 30_000, 10, 0}, k0 + 40_000, 1, Refused, State{}, 0, k0 + w, 20_000, k0},
		{"cost above limit is never allowed", State{k0, 2, 0}, k0 + 1, 11, CostExceedsLimit, State{}, 8, k0 + w, -1, k0},
		{"a lowered limit refuses until the minute ends", State{k0, 25, 0}, k0 + 1, 1, Refused, State{}, 0, k0 + w, w - 1, k0},
		{"a state ahead of the clock keeps its minute", State{k0 + w, 10, 0}, k0 + 10, 1, Refused, State{}, 0, k0 + 2*w, 2*w - 10, k0 + w},
		{"at the epoch itself", State{}, 0, 1, Allowed, State{0, 1, 0}, 9, w, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, ns := checkApply(t, FixedWindowEpoch, l, c.s, c.now, c.cost, c.s.A <= c.now)
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

// TestFixedWindowEpochMatchesOracle drives random keys through Apply and
// through an oracle that keeps the allowed cost per window index now/W:
// same outcome, remaining, reset and wait, and never more than the limit in
// one aligned window.
func TestFixedWindowEpochMatchesOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	for run := 0; run < 300; run++ {
		w := 1 + r.Int64N(2_000)
		limit := 1 + r.Int64N(10)
		l := Limit{Limit: limit, WindowMs: w}
		used := map[int64]int64{} // window index -> allowed cost
		var s State
		now := r.Int64N(1 << 41)
		for i := 0; i < 300; i++ {
			now += r.Int64N(w/2 + 1)
			cost := r.Int64N(limit + 2)
			res, ns := checkApply(t, FixedWindowEpoch, l, s, now, cost, true)
			k, c := now/w, max(cost, 1)
			want, retry := Refused, (k+1)*w-now
			switch {
			case c > limit:
				want, retry = CostExceedsLimit, -1
			case used[k]+c <= limit:
				want, retry = Allowed, 0
				used[k] += c
			}
			if res.Outcome != want || res.Remaining != max(0, limit-used[k]) || res.ResetAt != (k+1)*w ||
				res.WindowStart != k*w || res.RetryAfterMs != retry {
				t.Fatalf("w=%d limit=%d now=%d cost=%d: got %+v; oracle %v, used %d, reset %d, retry %d",
					w, limit, now, cost, res, want, used[k], (k+1)*w, retry)
			}
			s = ns
		}
	}
}

// FuzzFixedWindowEpoch: no input panics or wraps and the invariants hold;
// waits are exact for stored states not after now.
func FuzzFixedWindowEpoch(f *testing.F) {
	f.Add(int64(10), int64(60_000), int64(1_000), int64(10), int64(1_500), int64(1))
	f.Add(int64(-1), int64(-1), int64(-1<<63), int64(-1<<63), int64(-1<<63), int64(-1<<63))
	f.Add(int64(1<<63-1), int64(1<<63-1), int64(1<<63-1), int64(1<<63-1), int64(1<<63-1), int64(1<<63-1))
	f.Fuzz(func(t *testing.T, limit, w, a, b, now, cost int64) {
		checkApply(t, FixedWindowEpoch, Limit{Limit: limit, WindowMs: w}, State{A: a, B: b}, now, cost, a >= 0 && a <= clampTime(now))
		l := Limit{Limit: 1 + small(limit, 50), WindowMs: 1 + small(w, 10_000)}
		now = 1<<40 + small(now, 1<<40)
		s := State{A: now - small(a, 2*l.WindowMs), B: small(b, 60)}
		checkApply(t, FixedWindowEpoch, l, s, now, small(cost, 55), true)
	})
}
