package window

// Pure helpers for leased policies: how many units a grant may take now,
// how the token bucket is capped while units are held outside it, and how
// a holder's unused units come back. The FSM's argument for why these keep
// every key within its limit is in fsm/DESIGN.md ("Leases").

// Room is the largest cost a hit at now would be allowed (0 when none):
// fixed window limit - count (a lapsed window: limit), aligned fixed
// window limit - count in the aligned window holding now, sliding window
// limit - carried - cur (the exact estimate), token bucket the whole
// tokens in the bucket. Apply of any cost in [1, Room] is Allowed.
func Room(alg Algorithm, l Limit, s State, now int64) int64 {
	now = clampTime(now)
	if l.Limit < 1 || l.WindowMs < 1 {
		return 0
	}
	l.WindowMs = min(l.WindowMs, MaxTime)
	switch alg {
	case FixedWindow:
		start, count := fixedState(s)
		if now-start >= l.WindowMs {
			return l.Limit
		}
		return max(l.Limit-count, 0)
	case FixedWindowEpoch:
		_, used := epochWindow(l.WindowMs, s, now)
		return max(l.Limit-used, 0)
	case FixedWindowCalendar:
		if !IsCalendarPeriod(l.WindowMs) {
			return 0
		}
		_, _, used := calendarWindow(l, s, now)
		return max(l.Limit-used, 0)
	case SlidingWindow:
		v := viewSliding(l.WindowMs, s, now)
		return v.room(l.Limit, v.cur)
	case TokenBucket:
		ms, frac := bucketTAT(l.Limit, s)
		debt := bucketDebt(l.Limit, now, ms, frac)
		full := mul(capacity(l), l.WindowMs)
		if !debt.less(full) {
			return 0
		}
		return full.sub(debt).floorDiv(l.WindowMs, maxInt64)
	}
	return 0
}

// WindowEnd is when the units a hit at now counts belong to stop being
// that window's: fixed window start + W (the window now falls in, a fresh
// one if the stored one lapsed), aligned fixed window the aligned start +
// W, sliding window the end of the aligned window holding now. A token bucket has no window: MaxInt64.
func WindowEnd(alg Algorithm, l Limit, s State, now int64) int64 {
	now = clampTime(now)
	if l.WindowMs < 1 {
		return now
	}
	w := min(l.WindowMs, MaxTime)
	switch alg {
	case FixedWindow:
		start, _ := fixedState(s)
		if now-start >= w {
			start = now
		}
		return start + w
	case FixedWindowEpoch:
		start, _ := epochWindow(w, s, now)
		return start + w
	case FixedWindowCalendar:
		if !IsCalendarPeriod(l.WindowMs) {
			return now
		}
		_, end, _ := calendarWindow(l, s, now)
		return end
	case SlidingWindow:
		return alignDown(now, w) + w
	}
	return maxInt64
}

// Reserve caps a token bucket at capacity - held tokens at now: the TAT
// becomes at least now + held·W/L, exact in units of 1/L ms. While held
// tokens are outside the bucket (granted to holders, who may spend them
// any time before their expiry), a bucket refilled beyond that would let
// more through than the capacity. Other algorithms, and held <= 0, return
// s unchanged.
func Reserve(alg Algorithm, l Limit, s State, now, held int64) State {
	if alg != TokenBucket || held <= 0 || l.Limit < 1 || l.WindowMs < 1 {
		return s
	}
	now = clampTime(now)
	l.WindowMs = min(l.WindowMs, MaxTime)
	held = min(held, capacity(l))
	q, rem, ok := mul(held, l.WindowMs).divmod(l.Limit)
	if !ok {
		return s
	}
	ms, frac := bucketTAT(l.Limit, s)
	tms, tfrac := now+q, rem
	if ms > tms || (ms == tms && frac >= tfrac) {
		return s
	}
	return State{A: tms, B: tfrac, C: l.Limit}
}

// Refund gives back units a holder did not spend. Fixed window: off the
// count, only while the stored window is the one that started at start
// (the grant's); aligned fixed window: off the count, only while the
// stored aligned window is start and now is still in it; sliding window:
// off the current count, only while the stored aligned window is start;
// calendar window: off the count, only while the stored period began at
// start and has not ended; token bucket: tokens back into the
// bucket, never above full at now. Anything else returns s unchanged: the
// units stay spent.
func Refund(alg Algorithm, l Limit, s State, now, start, units int64) State {
	if units <= 0 || l.Limit < 1 || l.WindowMs < 1 {
		return s
	}
	now = clampTime(now)
	l.WindowMs = min(l.WindowMs, MaxTime)
	switch alg {
	case FixedWindow:
		if s.A != start || now-s.A >= l.WindowMs {
			return s
		}
		return State{A: s.A, B: max(s.B-units, 0)}
	case FixedWindowEpoch:
		a, count := epochState(s, l.WindowMs)
		if a != start || alignDown(now, l.WindowMs) != start {
			return s
		}
		return State{A: a, B: max(count-units, 0)}
	case FixedWindowCalendar:
		if !IsCalendarPeriod(l.WindowMs) {
			return s
		}
		a, end, count := calendarWindow(l, s, now)
		if a != start || clampTime(s.A) != a {
			return s
		}
		return State{A: a, B: max(count-units, 0), C: end}
	case SlidingWindow:
		if alignDown(s.A, l.WindowMs) != start || alignDown(now, l.WindowMs) != start {
			return s
		}
		return State{A: s.A, B: max(s.B-units, 0), C: s.C}
	case TokenBucket:
		ms, frac := bucketTAT(l.Limit, s)
		q, rem, ok := mul(units, l.WindowMs).divmod(l.Limit)
		if !ok || ms < now {
			return s
		}
		// TAT - units·W/L in (ms, frac) form, floored at now (a full bucket).
		ms, frac = ms-q, frac-rem
		if frac < 0 {
			ms, frac = ms-1, frac+l.Limit
		}
		if ms < now {
			return State{A: now, B: 0, C: l.Limit}
		}
		return State{A: ms, B: frac, C: l.Limit}
	}
	return s
}

// RefundCurrent gives back units to the window a hit at now would count in
// (a negative hit, envoyproxy/ratelimit's is_negative_hits): Refund with
// that window's start, never below zero, nothing once the window lapsed.
func RefundCurrent(alg Algorithm, l Limit, s State, now, units int64) State {
	if l.WindowMs < 1 {
		return s
	}
	if alg == FixedWindowCalendar {
		start, _, _ := calendarWindow(l, s, clampTime(now))
		return Refund(alg, l, s, now, start, units)
	}
	return Refund(alg, l, s, now, WindowEnd(alg, l, s, now)-min(l.WindowMs, MaxTime), units)
}
