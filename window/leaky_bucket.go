package window

// LeakyBucket: gubernator's leaky bucket (its algorithms.go, v2.13.0), in
// exact integers where gubernator uses float64. What is left in the bucket
// is Remaining + Frac/RateMs hits; it leaks Limit hits per RateMs ms
// (Duration, or with Gregorian the length of the calendar period) and
// holds at most Burst (0: Limit).
//
//   - a new key starts with Burst - Hits left (over the limit, with 0
//     left, when Hits > Burst);
//   - on a stored key, RESET_REMAINING fills it to Burst first, and a
//     changed Burst larger than what is left fills it to the new Burst;
//   - the leak since the last leak, elapsed*Limit/RateMs, is added only
//     once it is at least one whole hit (the last leak time then moves to
//     now; the fraction is kept), and the whole part is capped at Burst;
//   - a hit of Hits <= the whole part takes them (taking exactly the
//     whole part empties the bucket, fraction included); a larger one is
//     refused and takes nothing (DRAIN_OVER_LIMIT: it empties it);
//   - every call with Hits > 0 moves the key's expiry to now + Duration
//     (with Gregorian: the period's end); a key not hit for that long is
//     forgotten and starts full again;
//   - the reset time is now + (Limit - whole part) * (RateMs / Limit),
//     the rate truncated to whole ms as gubernator truncates it.
func applyLeaky(c Call, s CallState, now int64) (CallResult, CallState) {
	burst := c.Burst
	if burst == 0 {
		burst = c.Limit
	}
	if s.Fresh(now) {
		return newLeaky(c, burst, now)
	}
	if c.ResetRemaining {
		s.Remaining, s.Frac = burst, 0
	}
	if s.Burst != burst {
		if burst > s.Remaining {
			s.Remaining, s.Frac = burst, 0
		}
		s.Burst = burst
	}
	s.Limit, s.Duration, s.Gregorian = c.Limit, c.Duration, c.Gregorian
	rateMs, until := c.Duration, c.Duration
	if c.Gregorian {
		rateMs, until = gregorianLength(now, c.Duration), gregorianEnd(now, c.Duration)-now
	}
	if s.RateMs != rateMs && s.RateMs > 0 {
		// The fraction is kept in units of the old period.
		s.Frac, _, _ = mul(s.Frac, rateMs).divmod(s.RateMs)
	}
	s.RateMs = rateMs
	if c.Hits != 0 {
		s.ExpireAt = now + until
	}
	leak, frac, ok := mul(now-s.Start, c.Limit).divmod(rateMs)
	switch {
	case !ok:
		s.Remaining, s.Frac, s.Start = burst, 0, now
	case leak > 0:
		s.Frac += frac
		if s.Frac >= rateMs {
			s.Frac -= rateMs
			leak++
		}
		s.Remaining = min(s.Remaining, MaxCallLimit) + min(leak, MaxCallLimit)
		s.Start = now
	}
	if s.Remaining > burst {
		s.Remaining, s.Frac = burst, 0
	}
	rate := rateMs / c.Limit
	r := CallResult{Limit: c.Limit, Remaining: s.Remaining, Reset: now + (c.Limit-s.Remaining)*rate}
	switch {
	case s.Remaining == 0 && c.Hits > 0:
		r.Over = true
	case s.Remaining == c.Hits:
		s.Remaining, s.Frac = 0, 0
		r.Remaining, r.Reset = 0, now+c.Limit*rate
	case c.Hits > s.Remaining:
		r.Over = true
		if c.DrainOverLimit {
			s.Remaining, s.Frac, r.Remaining = 0, 0, 0
		}
	case c.Hits == 0:
	default:
		s.Remaining -= c.Hits
		r.Remaining, r.Reset = s.Remaining, now+(c.Limit-s.Remaining)*rate
	}
	return r, s
}

func newLeaky(c Call, burst, now int64) (CallResult, CallState) {
	rateMs, until := c.Duration, c.Duration
	if c.Gregorian {
		rateMs, until = gregorianLength(now, c.Duration), gregorianEnd(now, c.Duration)-now
	}
	// gubernator's first answer uses Duration / Limit as the rate even for
	// a Gregorian code (the code, not the period's length).
	rate := c.Duration / c.Limit
	s := CallState{Start: now, Remaining: burst - c.Hits, ExpireAt: now + until, Limit: c.Limit,
		Duration: c.Duration, Burst: burst, RateMs: rateMs, Gregorian: c.Gregorian}
	r := CallResult{Limit: c.Limit, Remaining: s.Remaining, Reset: now + (c.Limit-s.Remaining)*rate}
	if c.Hits > burst {
		s.Remaining = 0
		r.Over, r.Remaining, r.Reset = true, 0, now+c.Limit*rate
	}
	return r, s
}
