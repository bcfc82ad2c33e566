package window

import "time"

// Per-call limits: gubernator's V1 API sends a key's limit with every hit
// instead of naming a policy, and decides it with gubernator's own two
// algorithms. They differ from the policy algorithms on purpose (a caller
// coming from gubernator expects gubernator's numbers), so they have their
// own entry point, ApplyCall, and their own state, CallState.
const (
	// CallTokenBucket is gubernator's "token bucket": a window anchored at
	// the key's first call, Limit hits per Duration, all back at once when
	// it ends (call_token.go). It is not the refilling TokenBucket.
	CallTokenBucket Algorithm = 10
	// LeakyBucket is gubernator's leaky bucket: Burst deep, leaking Limit
	// per Duration (leaky_bucket.go).
	LeakyBucket Algorithm = 11
)

// Gregorian periods: a call's Duration when Gregorian is set
// (gubernator's GregorianMinutes ... GregorianYears), in UTC.
const (
	GregorianMinutes int64 = 0
	GregorianHours   int64 = 1
	GregorianDays    int64 = 2
	GregorianWeeks   int64 = 3 // gubernator v2.13.0 refuses it; so does Call.Validate
	GregorianMonths  int64 = 4
	GregorianYears   int64 = 5
)

// Call is one per-call item: the hit and the limit it brings.
type Call struct {
	Alg Algorithm // CallTokenBucket or LeakyBucket
	// Hits is the cost; 0 reads the key (and, as in gubernator, creates it).
	Hits  int64
	Limit int64
	// Duration is the window (token) or the time Limit leaks (leaky) in
	// ms, or a Gregorian period code when Gregorian.
	Duration int64
	// Burst is the leaky bucket's depth (0: Limit); the token bucket ignores it.
	Burst int64
	// The behaviours that change a decision.
	Gregorian, ResetRemaining, DrainOverLimit bool
}

// CallState is a per-call key's state; the zero value is a never-seen key.
// Token bucket: Start = the window's creation, Remaining = whole hits left,
// Limit and Duration as last called, Over = gubernator's stored status
// (set by a hit on an empty window, kept until the window ends).
// Leaky bucket: Start = the last leak, Remaining + Frac/RateMs = what is
// left (Frac < RateMs), RateMs = the time Limit leaks, Limit and Burst as
// last called. ExpireAt is the last instant the state counts (gubernator's
// cache expiry: alive while now <= ExpireAt).
type CallState struct {
	Start, Remaining, Frac, ExpireAt int64
	Limit, Duration, Burst, RateMs   int64
	Over, Gregorian                  bool
}

// Fresh reports whether s decides as a never-seen key at now.
func (s CallState) Fresh(now int64) bool { return s.ExpireAt == 0 || s.ExpireAt < now }

// CallResult is gubernator's answer to one item.
type CallResult struct {
	Over                    bool
	Limit, Remaining, Reset int64
	// Forget: the key's state is to be dropped (RESET_REMAINING on a
	// token bucket), not stored.
	Forget bool
}

// Bounds a call must keep (Validate); the state machine's decoder refuses
// anything else.
const (
	MaxCallLimit    = int64(1) << 40
	MaxCallDuration = int64(366 * 24 * 3600 * 1000)
)

// CallError is why an item is refused before it decides anything; its
// text is what the caller reads in the item's error field.
type CallError string

func (e CallError) Error() string { return string(e) }

// Validate checks what ApplyCall relies on.
func (c Call) Validate() error {
	switch {
	case c.Alg != CallTokenBucket && c.Alg != LeakyBucket:
		return CallError("invalid rate limit algorithm")
	case c.Hits < 0 || c.Hits > MaxCallLimit:
		return CallError("field 'hits' must be between 0 and 2^40")
	case c.Limit < 0 || c.Limit > MaxCallLimit || (c.Alg == LeakyBucket && c.Limit < 1):
		return CallError("field 'limit' must be between 0 (1 for a leaky bucket) and 2^40")
	case c.Burst < 0 || c.Burst > MaxCallLimit:
		return CallError("field 'burst' must be between 0 and 2^40")
	case c.Gregorian && c.Duration == GregorianWeeks:
		return CallError("`Duration = GregorianWeeks` not yet supported")
	case c.Gregorian && (c.Duration < GregorianMinutes || c.Duration > GregorianYears):
		return CallError("behavior DURATION_IS_GREGORIAN is set; but `Duration` is not a valid gregorian interval")
	case !c.Gregorian && (c.Duration < 1 || c.Duration > MaxCallDuration):
		return CallError("field 'duration' must be between 1 ms and 366 days")
	}
	return nil
}

// ApplyCall decides c at now (Unix ms, the state machine's clock) against
// s and returns gubernator's answer and the state to store. Unlike Apply,
// a refused item may change the state (DRAIN_OVER_LIMIT, the token
// bucket's stored status, a leaky bucket's leak and expiry), exactly as
// gubernator changes it. c must be valid; an invalid one answers over
// the limit and changes nothing. It never panics.
func ApplyCall(c Call, s CallState, now int64) (CallResult, CallState) {
	if c.Validate() != nil {
		return CallResult{Over: true, Limit: c.Limit}, s
	}
	now = clampTime(now)
	if c.Alg == LeakyBucket {
		return applyLeaky(c, s, now)
	}
	return applyCallToken(c, s, now)
}

// gregorianEnd is gubernator's GregorianExpiration in UTC: the last
// millisecond of the period holding now.
func gregorianEnd(now, code int64) int64 {
	t := time.UnixMilli(now).UTC()
	y, m, d := t.Date()
	var start, end time.Time
	switch code {
	case GregorianMinutes:
		start = t.Truncate(time.Minute)
		end = start.Add(time.Minute)
	case GregorianHours:
		start = time.Date(y, m, d, t.Hour(), 0, 0, 0, time.UTC)
		end = start.Add(time.Hour)
	case GregorianDays:
		start = time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
		end = start.AddDate(0, 0, 1)
	case GregorianMonths:
		start = time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
		end = start.AddDate(0, 1, 0)
	default: // GregorianYears
		start = time.Date(y, time.January, 1, 0, 0, 0, 0, time.UTC)
		end = start.AddDate(1, 0, 0)
	}
	return end.UnixMilli() - 1
}

// gregorianLength is the length in ms of the period holding now.
func gregorianLength(now, code int64) int64 {
	switch code {
	case GregorianMinutes:
		return 60_000
	case GregorianHours:
		return 3_600_000
	case GregorianDays:
		return 86_400_000
	}
	end := gregorianEnd(now, code) + 1
	t := time.UnixMilli(end - 1).UTC()
	var start time.Time
	if code == GregorianMonths {
		start = time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
	} else {
		start = time.Date(t.Year(), time.January, 1, 0, 0, 0, 0, time.UTC)
	}
	return end - start.UnixMilli()
}
