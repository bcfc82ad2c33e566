package window_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rlnode/rlnode/window"
)

// decideSink keeps the compiler from discarding Decide's result.
var decideSink window.Decision

// BenchmarkDecide measures one fixed-window decision. The inputs cycle over
// a precomputed table mixing hits inside a window, hits on a lapsed window,
// refused hits and costs above the limit, so neither the branch predictor
// nor constant folding sees a single path.
func BenchmarkDecide(b *testing.B) {
	type in struct{ prevStart, prevCount, now, windowMs, limit, cost int64 }
	const n = 1024 // power of two: the index is a mask
	r := rand.New(rand.NewPCG(1, 2))
	ins := make([]in, n)
	for i := range ins {
		windowMs := int64(60_000)
		limit := 1 + r.Int64N(100)
		prevStart := 1_700_000_000_000 + r.Int64N(1_000_000)
		ins[i] = in{
			prevStart: prevStart,
			prevCount: r.Int64N(limit + 1),
			now:       prevStart + r.Int64N(2*windowMs),
			windowMs:  windowMs,
			limit:     limit,
			cost:      1 + r.Int64N(3),
		}
	}
	b.ReportAllocs()
	var d window.Decision
	i := 0
	for b.Loop() {
		x := &ins[i&(n-1)]
		d = window.Decide(x.prevStart, x.prevCount, x.now, x.windowMs, x.limit, x.cost)
		i++
	}
	decideSink = d
}

// applySink keeps the compiler from discarding Apply's result.
var applySink window.Result

// BenchmarkApply measures one decision per algorithm. Like BenchmarkDecide
// it cycles over a precomputed table: states reached by replaying random
// hits (so windows are partly spent, buckets partly drained, some hits
// refused, some costs over the limit), at realistic times and limits.
func BenchmarkApply(b *testing.B) {
	for _, alg := range []window.Algorithm{window.FixedWindow, window.SlidingWindow, window.TokenBucket} {
		b.Run(alg.String(), func(b *testing.B) {
			type in struct {
				l         window.Limit
				s         window.State
				now, cost int64
			}
			const n = 1024 // power of two: the index is a mask
			r := rand.New(rand.NewPCG(5, 6))
			ins := make([]in, n)
			for i := range ins {
				l := window.Limit{Limit: 1 + r.Int64N(100), WindowMs: 1_000 * (1 + r.Int64N(3_600))}
				l.Burst = l.Limit + r.Int64N(10)
				now := 1_700_000_000_000 + r.Int64N(1_000_000)
				var s window.State
				for range r.IntN(2 * int(l.Limit)) {
					now += r.Int64N(l.WindowMs/l.Limit + 1)
					_, s = window.Apply(alg, l, s, now, 1+r.Int64N(3))
				}
				ins[i] = in{l: l, s: s, now: now + r.Int64N(l.WindowMs), cost: 1 + r.Int64N(l.Limit+l.Limit/8+1)}
			}
			b.ReportAllocs()
			var res window.Result
			i := 0
			for b.Loop() {
				x := &ins[i&(n-1)]
				res, _ = window.Apply(alg, x.l, x.s, x.now, x.cost)
				i++
			}
			applySink = res
		})
	}
}

// BenchmarkApplyCalendar measures one calendar-period decision (the
// period boundaries of the state and of now computed from the zone's
// rules on every hit), beside the epoch-aligned window it generalizes.
func BenchmarkApplyCalendar(b *testing.B) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		alg  window.Algorithm
		l    window.Limit
	}{
		{"epoch-1d", window.FixedWindowEpoch, window.Limit{Limit: 1000, WindowMs: window.DayMs}},
		{"calendar-1d-UTC", window.FixedWindowCalendar, window.Limit{Limit: 1000, WindowMs: window.DayMs}},
		{"calendar-1mo-Berlin", window.FixedWindowCalendar, window.Limit{Limit: 1000, WindowMs: window.MonthMs, Loc: berlin}},
	} {
		b.Run(c.name, func(b *testing.B) {
			const n = 1024
			r := rand.New(rand.NewPCG(7, 8))
			nows := make([]int64, n) // increasing, as the FSM's clock: 1024 hits over 90 days
			for i := range nows {
				nows[i] = 1_700_000_000_000 + int64(i)*90*window.DayMs/n + r.Int64N(60_000)
			}
			b.ReportAllocs()
			var res window.Result
			var s window.State
			i := 0
			for b.Loop() {
				if i&(n-1) == 0 {
					s = window.State{} // the clock starts over with a new key
				}
				res, s = window.Apply(c.alg, c.l, s, nows[i&(n-1)], 1)
				i++
			}
			applySink = res
		})
	}
}
