package window

// fixed_window aligned to the epoch (FixedWindowEpoch): State{A: the
// aligned start of the window B was counted in, B: count, C: 0}. Windows
// are [k*W, (k+1)*W) in Unix ms, as envoyproxy/ratelimit and most Redis
// limiters cut them, so every key's minute ends on the minute.
//
//	cur     = now - now mod W
//	a       = A - A mod W                 (a stored start read aligned down)
//	start, used = (a, B) if a >= cur, else (cur, 0)
//	allowed = used + cost <= L; cost > L is CostExceedsLimit
//	Remaining = max(0, L - count); ResetAt = start + W; WindowStart = start
//	RetryAfterMs = start + W - now (refused; >= 1)
//	ExpiresAt = a + W
//
// a > cur only for a state written on a clock ahead of now (the FSM's clock
// never runs backwards); that window is kept until it ends, as the anchored
// window keeps a start after now, so a hit can never be counted twice.

// epochState reads s for window w: its aligned start and count.
func epochState(s State, w int64) (start, count int64) {
	a := clampTime(s.A)
	return a - a%w, max(s.B, 0)
}

// epochWindow is the aligned window a hit at now counts in and what it
// already holds: the stored one while it has not ended (or lies ahead of
// now), else a fresh one at now's aligned start.
func epochWindow(w int64, s State, now int64) (start, used int64) {
	a, count := epochState(s, w)
	if start = now - now%w; a >= start {
		return a, count
	}
	return start, 0
}

func applyFixedEpoch(l Limit, s State, now, cost int64) (Result, State) {
	start, used := epochWindow(l.WindowMs, s, now)
	return decideInPeriod(l, s, start, start+l.WindowMs, used, now, cost, 0)
}

// decideInPeriod is the aligned fixed windows' decision (epoch and
// calendar) for a hit at now in the period [start, end) that already
// holds used: a counted hit leaves State{start, used + cost, c}, a refused
// one (or a cost over the limit) leaves s as it was.
func decideInPeriod(l Limit, s State, start, end, used, now, cost, c int64) (Result, State) {
	r := Result{Limit: l.Limit, WindowMs: l.WindowMs, ResetAt: end, WindowStart: start}
	switch {
	case cost > l.Limit:
		r.Outcome, r.RetryAfterMs = CostExceedsLimit, -1
		r.Remaining = max(0, l.Limit-used)
		return r, s
	case used <= l.Limit-cost:
		r.Outcome = Allowed
		r.Remaining = l.Limit - used - cost
		return r, State{A: start, B: used + cost, C: c}
	default:
		r.Outcome, r.RetryAfterMs = Refused, end-now
		r.Remaining = max(0, l.Limit-used)
		return r, s
	}
}

func expiresFixedEpoch(l Limit, s State) int64 {
	a, _ := epochState(s, l.WindowMs)
	return neverAfter(a + l.WindowMs)
}
