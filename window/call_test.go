package window

import (
	"math/rand/v2"
	"testing"
	"time"
)

type callStep struct {
	hits, limit, burst  int64
	reset, drain        bool
	over                bool
	remaining, resetOff int64 // resetOff: the reset time minus now; -1: not checked
	sleep               int64
}

func runCalls(t *testing.T, alg Algorithm, duration int64, steps []callStep) {
	t.Helper()
	now := int64(1_700_000_000_000)
	var s CallState
	for i, st := range steps {
		c := Call{Alg: alg, Hits: st.hits, Limit: st.limit, Duration: duration, Burst: st.burst, ResetRemaining: st.reset, DrainOverLimit: st.drain}
		var r CallResult
		r, s = ApplyCall(c, s, now)
		if r.Forget {
			s = CallState{}
		}
		if r.Over != st.over || r.Remaining != st.remaining || r.Limit != st.limit || (st.resetOff >= 0 && r.Reset-now != st.resetOff) {
			t.Fatalf("step %d (%+v): got over=%v remaining=%d limit=%d reset=now%+d", i, st, r.Over, r.Remaining, r.Limit, r.Reset-now)
		}
		now += st.sleep
	}
}

// The sequence of gubernator's TestLeakyBucket: limit 10 per 30 s leaks
// one hit every 3 s; the reset time is now + (limit - remaining) * 3 s.
func TestLeakyBucketAsGubernator(t *testing.T) {
	runCalls(t, LeakyBucket, 30_000, []callStep{
		{hits: 1, limit: 10, remaining: 9, resetOff: 3000, sleep: 1000},
		{hits: 1, limit: 10, remaining: 8, resetOff: 6000, sleep: 1000},
		{hits: 1, limit: 10, remaining: 7, resetOff: 9000, sleep: 1500},
		{hits: 0, limit: 10, remaining: 8, resetOff: 6000, sleep: 3000},
		{hits: 0, limit: 10, remaining: 9, resetOff: 3000},
		{hits: 9, limit: 10, remaining: 0, resetOff: 30000},
		{hits: 1, limit: 10, over: true, remaining: 0, resetOff: 30000, sleep: 3000},
		{hits: 0, limit: 10, remaining: 1, resetOff: 27000, sleep: 60000},
		{hits: 0, limit: 10, remaining: 10, resetOff: 0, sleep: 60000},
		{hits: 10, limit: 10, remaining: 0, resetOff: 30000, sleep: 29000},
		{hits: 9, limit: 10, remaining: 0, resetOff: 30000, sleep: 3000},
		{hits: 1, limit: 10, remaining: 0, resetOff: 30000},
	})
}

func TestLeakyBucketBurstAndDrain(t *testing.T) {
	runCalls(t, LeakyBucket, 1000, []callStep{
		{hits: 1, limit: 1, burst: 3, remaining: 2, resetOff: -1000},
		{hits: 5, limit: 1, burst: 3, over: true, remaining: 2, resetOff: -1},
		// Drained; a second later (the key's last instant) one hit leaked.
		{hits: 5, limit: 1, burst: 3, drain: true, over: true, remaining: 0, resetOff: -1, sleep: 1000},
		{hits: 0, limit: 1, burst: 3, remaining: 1, resetOff: -1},
		{hits: 0, limit: 1, burst: 3, reset: true, remaining: 3, resetOff: -1},
		// A larger burst fills the bucket to it.
		{hits: 1, limit: 1, burst: 6, remaining: 5, resetOff: -1},
	})
}

// gubernator's TestChangeLimit, TestDrainOverLimit and TestResetRemaining
// for the token bucket.
func TestCallTokenBucketAsGubernator(t *testing.T) {
	runCalls(t, CallTokenBucket, 9000, []callStep{
		{hits: 1, limit: 100, remaining: 99, resetOff: 9000},
		{hits: 1, limit: 100, remaining: 98, resetOff: 9000},
		{hits: 1, limit: 10, remaining: 7, resetOff: 9000},
		{hits: 1, limit: 10, remaining: 6, resetOff: 9000},
		{hits: 1, limit: 200, remaining: 195, resetOff: 9000, sleep: 100},
		{hits: 200, limit: 200, over: true, remaining: 195, resetOff: 8900},
		{hits: 200, limit: 200, drain: true, over: true, remaining: 0, resetOff: 8900},
		// Over is kept until the window ends, hits of 0 included.
		{hits: 1, limit: 200, over: true, remaining: 0, resetOff: 8900},
		{hits: 0, limit: 200, over: true, remaining: 0, resetOff: 8900},
		{hits: 1, limit: 200, reset: true, remaining: 200, resetOff: -1},
		{hits: 201, limit: 200, over: true, remaining: 200, resetOff: 9000, sleep: 9000},
		{hits: 5, limit: 200, remaining: 195, resetOff: 0, sleep: 1},
		{hits: 5, limit: 200, remaining: 195, resetOff: 9000},
	})
}

func TestCallTokenBucketDurationChange(t *testing.T) {
	now := int64(1_000_000)
	r, s := ApplyCall(Call{Alg: CallTokenBucket, Hits: 4, Limit: 10, Duration: 10_000}, CallState{}, now)
	if r.Remaining != 6 || r.Reset != now+10_000 {
		t.Fatalf("first: %+v", r)
	}
	// A longer duration keeps the window's start and count.
	r, s = ApplyCall(Call{Alg: CallTokenBucket, Hits: 1, Limit: 10, Duration: 20_000}, s, now+5000)
	if r.Remaining != 5 || r.Reset != now+20_000 {
		t.Fatalf("longer: %+v", r)
	}
	// A duration that already ended starts the window again, full.
	r, _ = ApplyCall(Call{Alg: CallTokenBucket, Hits: 1, Limit: 10, Duration: 1000}, s, now+6000)
	if r.Remaining != 9 || r.Reset != now+7000 {
		t.Fatalf("shorter: %+v", r)
	}
}

func TestGregorianEnd(t *testing.T) {
	at := time.Date(2024, 2, 29, 13, 45, 30, 0, time.UTC).UnixMilli()
	for code, want := range map[int64]time.Time{
		GregorianMinutes: time.Date(2024, 2, 29, 13, 46, 0, 0, time.UTC),
		GregorianHours:   time.Date(2024, 2, 29, 14, 0, 0, 0, time.UTC),
		GregorianDays:    time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC),
		GregorianMonths:  time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC),
		GregorianYears:   time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		if got := gregorianEnd(at, code); got != want.UnixMilli()-1 {
			t.Errorf("code %d: end %d, want %d", code, got, want.UnixMilli()-1)
		}
	}
	if got := gregorianLength(at, GregorianMonths); got != 29*86_400_000 {
		t.Errorf("February 2024 is %d ms", got)
	}
	r, _ := ApplyCall(Call{Alg: CallTokenBucket, Hits: 1, Limit: 5, Duration: GregorianMinutes, Gregorian: true}, CallState{}, at)
	if r.Reset != time.Date(2024, 2, 29, 13, 46, 0, 0, time.UTC).UnixMilli()-1 {
		t.Errorf("gregorian token reset %d", r.Reset)
	}
}

func TestCallValidate(t *testing.T) {
	for _, c := range []Call{
		{Alg: FixedWindow, Limit: 1, Duration: 1},
		{Alg: LeakyBucket, Limit: 0, Duration: 1},
		{Alg: CallTokenBucket, Limit: 1, Duration: 0},
		{Alg: CallTokenBucket, Limit: 1, Hits: -1, Duration: 1},
		{Alg: CallTokenBucket, Limit: 1, Duration: GregorianWeeks, Gregorian: true},
		{Alg: CallTokenBucket, Limit: 1, Duration: 6, Gregorian: true},
		{Alg: CallTokenBucket, Limit: MaxCallLimit + 1, Duration: 1},
	} {
		if c.Validate() == nil {
			t.Errorf("%+v: valid", c)
		}
		if r, s := ApplyCall(c, CallState{}, 5); !r.Over || s != (CallState{}) {
			t.Errorf("%+v: decided %+v", c, r)
		}
	}
}

// floatLeaky is gubernator's leaky bucket as its source states it, in
// float64: the oracle for the integer version on numbers where float64
// is exact (durations that are whole multiples of the limit).
type floatLeaky struct {
	ok              bool
	remaining       float64
	updated, expire int64
	burst           int64
}

func (b *floatLeaky) call(c Call, now int64) CallResult {
	burst := c.Burst
	if burst == 0 {
		burst = c.Limit
	}
	rate := float64(c.Duration) / float64(c.Limit)
	if !b.ok || b.expire < now {
		*b = floatLeaky{ok: true, remaining: float64(burst - c.Hits), updated: now, expire: now + c.Duration, burst: burst}
		r := CallResult{Limit: c.Limit, Remaining: burst - c.Hits, Reset: now + (c.Limit-(burst-c.Hits))*int64(rate)}
		if c.Hits > burst {
			b.remaining = 0
			r = CallResult{Over: true, Limit: c.Limit, Reset: now + c.Limit*int64(rate)}
		}
		return r
	}
	if c.ResetRemaining {
		b.remaining = float64(burst)
	}
	if b.burst != burst {
		if burst > int64(b.remaining) {
			b.remaining = float64(burst)
		}
		b.burst = burst
	}
	if c.Hits != 0 {
		b.expire = now + c.Duration
	}
	leak := float64(now-b.updated) / rate
	if int64(leak) > 0 {
		b.remaining += leak
		b.updated = now
	}
	if int64(b.remaining) > burst {
		b.remaining = float64(burst)
	}
	r := CallResult{Limit: c.Limit, Remaining: int64(b.remaining), Reset: now + (c.Limit-int64(b.remaining))*int64(rate)}
	switch {
	case int64(b.remaining) == 0 && c.Hits > 0:
		r.Over = true
	case int64(b.remaining) == c.Hits:
		b.remaining, r.Remaining, r.Reset = 0, 0, now+c.Limit*int64(rate)
	case c.Hits > int64(b.remaining):
		r.Over = true
		if c.DrainOverLimit {
			b.remaining, r.Remaining = 0, 0
		}
	case c.Hits == 0:
	default:
		b.remaining -= float64(c.Hits)
		r.Remaining, r.Reset = int64(b.remaining), now+(c.Limit-int64(b.remaining))*int64(rate)
	}
	return r
}

func TestLeakyBucketOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for run := 0; run < 300; run++ {
		limit := 1 + rng.Int64N(20)
		// A rate of 2^k ms per hit keeps every float64 of the model exact.
		duration := limit << (1 + rng.IntN(10))
		var o floatLeaky
		var s CallState
		now := int64(1_000_000)
		for i := 0; i < 60; i++ {
			c := Call{Alg: LeakyBucket, Limit: limit, Duration: duration, Hits: rng.Int64N(limit + 2)}
			if rng.IntN(4) == 0 {
				c.Hits = 0
			}
			if rng.IntN(5) == 0 {
				c.Burst = limit + rng.Int64N(5)
			}
			c.DrainOverLimit = rng.IntN(6) == 0
			c.ResetRemaining = rng.IntN(15) == 0
			want := o.call(c, now)
			var got CallResult
			got, s = ApplyCall(c, s, now)
			if got != want {
				t.Fatalf("run %d step %d %+v at %d: got %+v, the float model %+v", run, i, c, now, got, want)
			}
			now += rng.Int64N(duration / 2)
		}
	}
}

// Any stored state and any valid call decide without a panic, and a
// result never reports more than the bucket can hold.
func TestApplyCallTotal(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	vals := []int64{0, 1, -1, MaxTime, -MaxTime, maxInt64, -maxInt64 - 1, MaxCallLimit}
	pick := func() int64 {
		if rng.IntN(2) == 0 {
			return vals[rng.IntN(len(vals))]
		}
		return rng.Int64()
	}
	for i := 0; i < 20000; i++ {
		s := CallState{Start: pick(), Remaining: pick(), Frac: pick(), ExpireAt: pick(), Limit: pick(), Duration: pick(), Burst: pick(), RateMs: pick()}
		c := Call{Alg: []Algorithm{CallTokenBucket, LeakyBucket}[rng.IntN(2)], Hits: rng.Int64N(100), Limit: 1 + rng.Int64N(MaxCallLimit), Duration: 1 + rng.Int64N(MaxCallDuration)}
		ApplyCall(c, s, rng.Int64N(MaxTime))
	}
}
