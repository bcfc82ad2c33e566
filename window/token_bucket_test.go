package window

import (
	"math/rand/v2"
	"testing"
)

const day = 86_400_000

func TestTokenBucketTable(t *testing.T) {
	const t0 = 1_700_000_000_000
	ten := Limit{Limit: 10, WindowMs: 1_000} // one token per 100 ms, capacity 10
	cases := []struct {
		name      string
		l         Limit
		s         State
		now, cost int64
		want      Outcome
		wantState State // for Allowed only
		remaining int64
		resetAt   int64
		retry     int64
	}{
		{"new key starts full", ten, State{}, t0, 1, Allowed, State{t0 + 100, 0, 10}, 9, t0 + 100, 0},
		{"new key takes the whole capacity", ten, State{}, t0, 10, Allowed, State{t0 + 1_000, 0, 10}, 0, t0 + 1_000, 0},
		{"cost above capacity is never allowed", ten, State{}, t0, 11, CostExceedsLimit, State{}, 10, t0, -1},
		{"burst is the capacity", Limit{Limit: 10, WindowMs: 1_000, Burst: 3}, State{}, t0, 3, Allowed, State{t0 + 300, 0, 10}, 0, t0 + 300, 0},
		{"cost above burst is never allowed", Limit{Limit: 10, WindowMs: 1_000, Burst: 3}, State{}, t0, 4, CostExceedsLimit, State{}, 3, t0, -1},
		{"empty bucket waits for one token", ten, State{t0 + 1_000, 0, 10}, t0, 1, Refused, State{}, 0, t0 + 1_000, 100},
		{"one ms before the token", ten, State{t0 + 1_000, 0, 10}, t0 + 99, 1, Refused, State{}, 0, t0 + 1_000, 1},
		{"exactly when the token is there", ten, State{t0 + 1_000, 0, 10}, t0 + 100, 1, Allowed, State{t0 + 1_100, 0, 10}, 0, t0 + 1_100, 0},
		{"weighted cost waits for all its tokens", ten, State{t0 + 1_000, 0, 10}, t0 + 100, 4, Refused, State{}, 1, t0 + 1_000, 300},
		{"a past TAT is a full bucket", ten, State{t0 - 5, 0, 10}, t0, 10, Allowed, State{t0 + 1_000, 0, 10}, 0, t0 + 1_000, 0},
		// 3 per second: one token every 333 1/3 ms, kept as TAT fractions.
		{"fractional refill", Limit{Limit: 3, WindowMs: 1_000}, State{}, t0, 1, Allowed, State{t0 + 333, 1, 3}, 2, t0 + 334, 0},
		{"fractional wait rounds up", Limit{Limit: 3, WindowMs: 1_000}, State{t0 + 1_000, 0, 3}, t0, 1, Refused, State{}, 0, t0 + 1_000, 334},
		{"fraction under another limit rounds against the client", Limit{Limit: 3, WindowMs: 1_000}, State{t0 + 999, 1, 2}, t0, 3, Refused, State{}, 0, t0 + 1_000, 1_000},
		{"cost 0 counts as 1", ten, State{}, t0, 0, Allowed, State{t0 + 100, 0, 10}, 9, t0 + 100, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, ns := checkApply(t, TokenBucket, c.l, c.s, c.now, c.cost, true)
			if c.want != Allowed {
				c.wantState = c.s
			}
			if r.Outcome != c.want || ns != c.wantState || r.Remaining != c.remaining ||
				r.ResetAt != c.resetAt || r.RetryAfterMs != c.retry || r.WindowStart != 0 ||
				r.Limit != capacity(c.l) || r.WindowMs != c.l.WindowMs {
				t.Fatalf("got %+v state %+v; want %v state %+v remaining %d resetAt %d retry %d",
					r, ns, c.want, c.wantState, c.remaining, c.resetAt, c.retry)
			}
		})
	}
}

// TestTokenBucketOnePerDay: one token per 24 h is exact to the ms.
func TestTokenBucketOnePerDay(t *testing.T) {
	const t0 = 1_700_000_000_123
	l := Limit{Limit: 1, WindowMs: day}
	r, s := checkApply(t, TokenBucket, l, State{}, t0, 1, true)
	if r.Outcome != Allowed || r.Remaining != 0 || r.ResetAt != t0+day {
		t.Fatalf("first hit: %+v", r)
	}
	if r, _ := checkApply(t, TokenBucket, l, s, t0+1, 1, true); r.Outcome != Refused || r.RetryAfterMs != day-1 {
		t.Fatalf("second hit 1 ms later: %+v, want retry %d", r, day-1)
	}
	if r, _ := checkApply(t, TokenBucket, l, s, t0+day-1, 1, true); r.Outcome != Refused || r.RetryAfterMs != 1 {
		t.Fatalf("1 ms before the day is over: %+v", r)
	}
	if r, _ := checkApply(t, TokenBucket, l, s, t0+day, 1, true); r.Outcome != Allowed || r.ResetAt != t0+2*day {
		t.Fatalf("a day later: %+v", r)
	}
	if e := ExpiresAt(TokenBucket, l, s); e != t0+day {
		t.Fatalf("ExpiresAt = %d, want %d", e, t0+day)
	}
}

// TestTokenBucketTenThousandPerSecond: 10,000 per second is 10 tokens per
// ms. Drain the bucket, then for 100,000 ms take exactly 10 hits every ms
// (1e6 hits): every one is allowed, the 11th each ms is refused with a
// 1 ms wait, and nothing drifts.
func TestTokenBucketTenThousandPerSecond(t *testing.T) {
	const t0 = 1_700_000_000_000
	l := Limit{Limit: 10_000, WindowMs: 1_000}
	var s State
	r, s := Apply(TokenBucket, l, s, t0, 10_000)
	if r.Outcome != Allowed || r.Remaining != 0 || r.ResetAt != t0+1_000 {
		t.Fatalf("draining hit: %+v", r)
	}
	for ms := int64(1); ms <= 100_000; ms++ {
		now := t0 + ms
		for i := 0; i < 10; i++ {
			if r, s = Apply(TokenBucket, l, s, now, 1); r.Outcome != Allowed {
				t.Fatalf("ms %d hit %d refused: %+v (state %+v)", ms, i, r, s)
			}
		}
		if r, _ := Apply(TokenBucket, l, s, now, 1); r.Outcome != Refused || r.RetryAfterMs != 1 || r.ResetAt != now+1_000 {
			t.Fatalf("ms %d 11th hit: %+v", ms, r)
		}
	}
	if want := (State{A: t0 + 100_000 + 1_000, B: 0, C: 10_000}); s != want {
		t.Fatalf("after 1e6 hits state %+v, want %+v", s, want)
	}
}

// TestTokenBucketNoDrift: at 3 per second with capacity 2, a client that
// retries exactly after each retryAfter gets its n-th hit (n >= 1) at
// t0 + ceil((n-1)*1000/3), for a million hits: no rounding accumulates.
func TestTokenBucketNoDrift(t *testing.T) {
	const t0 = 1_700_000_000_000
	l := Limit{Limit: 3, WindowMs: 1_000, Burst: 2}
	var s State
	now := int64(t0)
	n := int64(1_000_000)
	if testing.Short() {
		n = 100_000
	}
	for i := int64(0); i < n; i++ {
		want := int64(t0)
		if i >= 1 {
			want = t0 + ((i-1)*1_000+2)/3
		}
		r, ns := Apply(TokenBucket, l, s, now, 1)
		if r.Outcome == Refused {
			now += r.RetryAfterMs
			r, ns = Apply(TokenBucket, l, s, now, 1)
		}
		if r.Outcome != Allowed || now != want {
			t.Fatalf("hit %d at %d: %+v; want allowed at %d", i, now, r, want)
		}
		s = ns
	}
}

// TestTokenBucketLargeValues: capacity 2^40 and 366-day windows need
// 128-bit products; waits beyond the clamped time range saturate instead of
// wrapping.
func TestTokenBucketLargeValues(t *testing.T) {
	const w = 366 * day
	const t0 = 1_700_000_000_000
	l := Limit{Limit: 1 << 40, WindowMs: w}
	r, s := checkApply(t, TokenBucket, l, State{}, t0, 1<<40, true)
	if r.Outcome != Allowed || r.Remaining != 0 || r.ResetAt != t0+w {
		t.Fatalf("draining 2^40 tokens: %+v", r)
	}
	// 2^40 tokens per w is about 34.77 per ms: 34 are back after 1 ms, 35 are not.
	if r, _ := checkApply(t, TokenBucket, l, s, t0+1, 34, true); r.Outcome != Allowed {
		t.Fatalf("34 tokens after 1 ms: %+v", r)
	}
	if r, _ := checkApply(t, TokenBucket, l, s, t0+1, 35, true); r.Outcome != Refused || r.RetryAfterMs != 1 {
		t.Fatalf("35 tokens after 1 ms: %+v", r)
	}
	// One token per 366 days with a 2^40 burst would take 2^40 years to
	// refill: the bucket holds what refills in MaxRefillMs, and stays exact.
	slow := Limit{Limit: 1, WindowMs: w, Burst: 1 << 40}
	capy := (MaxRefillMs + w - 1) / w
	if r, _ := checkApply(t, TokenBucket, slow, State{}, t0, 1<<40, true); r.Outcome != CostExceedsLimit || r.Limit != capy {
		t.Fatalf("2^40 tokens from a bucket bounded to %d: %+v", capy, r)
	}
	r, s = checkApply(t, TokenBucket, slow, State{}, t0, capy, true)
	if r.Outcome != Allowed || s != (State{A: t0 + capy*w, C: 1}) || ExpiresAt(TokenBucket, slow, s) != t0+capy*w {
		t.Fatalf("draining the bounded bucket: %+v %+v", r, s)
	}
	if r, _ := checkApply(t, TokenBucket, slow, s, t0+5, 1, true); r.Outcome != Refused || r.RetryAfterMs != w-5 {
		t.Fatalf("after draining the bounded bucket: %+v", r)
	}
	for _, s := range []State{{1<<63 - 1, 1<<63 - 1, 1<<63 - 1}, {-1 << 63, -1, -1}, {t0, 1<<63 - 1, 3}, {1<<63 - 1, 5, 10}} {
		for _, l := range []Limit{l, slow, {Limit: 1<<63 - 1, WindowMs: 1<<63 - 1, Burst: 1<<63 - 1}} {
			checkApply(t, TokenBucket, l, s, t0, 1, false)
			checkApply(t, TokenBucket, l, s, 1<<63-1, 1<<63-1, false)
		}
	}
}

// TestTokenBucketMatchesOracle drives random keys against the exact
// rational token count, checking every field of every decision and the
// single-decision invariants; and that no span of time [t1, t2] admits
// more than capacity + refill(t2-t1) tokens.
func TestTokenBucketMatchesOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	runs := 200
	if testing.Short() {
		runs = 20
	}
	for run := 0; run < runs; run++ {
		w := 1 + r.Int64N(5_000)
		limit := 1 + r.Int64N(20)
		burst := r.Int64N(30)
		l := Limit{Limit: limit, WindowMs: w, Burst: burst}
		capy := capacity(l)
		now := r.Int64N(1_000_000)
		o := newBucketOracle(limit, w, capy, now)
		var s State
		type hit struct{ t, cost int64 }
		var allowed []hit
		for i := 0; i < 300; i++ {
			now += r.Int64N(w/limit + 2)
			cost := r.Int64N(capy + 2)
			res, ns := checkApply(t, TokenBucket, l, s, now, cost, true)
			out, rem, reset, retry := o.hit(now, max(cost, 1))
			if res.Outcome != out || res.Remaining != rem || res.ResetAt != reset || res.RetryAfterMs != retry {
				t.Fatalf("run %d hit %d (%+v, state %+v, now %d, cost %d): got %+v; oracle %v remaining %d resetAt %d retry %d",
					run, i, l, s, now, cost, res, out, rem, reset, retry)
			}
			s = ns
			if res.Outcome != Allowed {
				continue
			}
			allowed = append(allowed, hit{now, max(cost, 1)})
			sum := int64(0)
			for j := len(allowed) - 1; j >= 0 && j >= len(allowed)-64; j-- {
				sum += allowed[j].cost
				// sum <= capy + (now - t_j)*limit/w, in integers.
				if sum*w > capy*w+(now-allowed[j].t)*limit {
					t.Fatalf("run %d: %d tokens in [%d, %d], capacity %d, %d per %d ms", run, sum, allowed[j].t, now, capy, limit, w)
				}
			}
		}
	}
}

// FuzzTokenBucket checks that no input panics and that every decision
// keeps the invariants of checkApply, retryAfter exactness included: every
// stored state reads as one exact TAT.
func FuzzTokenBucket(f *testing.F) {
	f.Add(int64(10), int64(1000), int64(0), int64(1_700_000_001_000), int64(0), int64(10), int64(1_700_000_000_000), int64(1))
	f.Add(int64(1), int64(day), int64(0), int64(0), int64(0), int64(0), int64(0), int64(1))
	f.Add(int64(3), int64(1000), int64(2), int64(1_700_000_000_999), int64(1), int64(2), int64(1_700_000_000_000), int64(2))
	f.Add(int64(1<<40), int64(366*day), int64(1<<40), int64(1<<62), int64(-1), int64(1<<62), int64(1<<63-1), int64(1<<40))
	f.Add(int64(-1), int64(-1), int64(-1), int64(-1<<63), int64(-1<<63), int64(-1<<63), int64(-1<<63), int64(-1<<63))
	f.Fuzz(func(t *testing.T, limit, w, burst, a, b, c, now, cost int64) {
		checkApply(t, TokenBucket, Limit{Limit: limit, WindowMs: w, Burst: burst}, State{A: a, B: b, C: c}, now, cost, true)

		// Folded: up to 1000 tokens per up to a day, a TAT up to two
		// windows past now written under this limit or another.
		l := Limit{Limit: 1 + small(limit, 1_000), WindowMs: 1 + small(w, day), Burst: small(burst, 2_000)}
		now = 1<<40 + small(now, 1<<40)
		s := State{A: now - 1_000 + small(a, 2*l.WindowMs+1_000), C: 1 + small(c, 1_000)}
		s.B = small(b, s.C)
		checkApply(t, TokenBucket, l, s, now, small(cost, 2_100), true)
	})
}
