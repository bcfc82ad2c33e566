package window

// sliding_window: State{A: current aligned window start, B: its count,
// C: the previous window's count}. The arithmetic is in doc.go.

// slidingView is a stored state seen from the window that holds now.
type slidingView struct {
	w, curStart, elapsed int64
	cur, prev            int64
	// carried is ceil(prev*(w-elapsed)/w): the previous window's weight in
	// whole hits, rounded up. Because limit - cur - cost is an integer,
	// prev*(w-e) + (cur+cost)*w <= limit*w holds exactly when
	// carried + cur + cost <= limit.
	carried int64
}

// viewSliding normalises s to the aligned window holding now: a state of
// that window keeps its counts, one of the window before becomes the
// previous count, anything older is zero. A start that is not aligned (the
// window length changed) is first aligned down; a start after the current
// window (which a monotonic clock never makes) counts as current, the
// conservative reading. Negative counts read as 0.
func viewSliding(w int64, s State, now int64) slidingView {
	v := slidingView{w: w, elapsed: now % w}
	v.curStart = now - v.elapsed
	a := alignDown(s.A, w)
	switch {
	case a >= v.curStart:
		v.cur, v.prev = max(s.B, 0), max(s.C, 0)
	case a == v.curStart-w:
		v.prev = max(s.B, 0)
	}
	if v.prev > 0 {
		v.carried = mul(v.prev, w-v.elapsed).ceilDiv(w, maxInt64)
	}
	return v
}

// alignDown is the start of the w-aligned window holding t, t clamped into
// [0, MaxTime].
func alignDown(t, w int64) int64 {
	t = clampTime(t)
	return t - t%w
}

// fits reports prev*(w-e) + (cur+cost)*w <= limit*w for cost <= limit,
// without overflow.
func (v slidingView) fits(limit, cost int64) bool {
	return v.carried <= limit-cost && v.cur <= limit-cost-v.carried
}

// room is how many hits of cost 1 fit now on top of cur: max(0, limit -
// carried - cur).
func (v slidingView) room(limit, cur int64) int64 {
	if v.carried >= limit {
		return 0
	}
	return max(limit-v.carried-cur, 0)
}

// resetAt is when the estimate reaches 0 with cur and prev as given.
func (v slidingView) resetAt(now, cur int64) int64 {
	switch {
	case cur > 0:
		return v.curStart + 2*v.w
	case v.prev > 0:
		return v.curStart + v.w
	}
	return now
}

func applySliding(l Limit, s State, now, cost int64) (Result, State) {
	v := viewSliding(l.WindowMs, s, now)
	r := Result{Limit: l.Limit, WindowMs: l.WindowMs, WindowStart: v.curStart}
	switch {
	case cost > l.Limit:
		r.Outcome, r.RetryAfterMs = CostExceedsLimit, -1
	case v.fits(l.Limit, cost):
		cur := v.cur + cost
		r.Outcome = Allowed
		r.Remaining = v.room(l.Limit, cur)
		r.ResetAt = v.resetAt(now, cur)
		return r, State{A: v.curStart, B: cur, C: v.prev}
	default:
		r.Outcome = Refused
		r.RetryAfterMs = v.retryAfter(l.Limit, cost)
	}
	r.Remaining = v.room(l.Limit, v.cur)
	r.ResetAt = v.resetAt(now, v.cur)
	return r, s
}

// retryAfter is the smallest d >= 1 such that a hit of cost (<= limit)
// refused now is allowed at now+d if nothing else arrives. In the current
// window only the previous window's weight shrinks, so the hit needs
// prev*(w-e') <= k*w with k = limit-cost-cur, that is e' >= w -
// floor(k*w/prev). Failing that, in the next window cur becomes the
// previous count and the hit needs cur*(w-e2) <= (limit-cost)*w; at the
// start of the window after that the estimate is 0 and any cost <= limit
// fits.
func (v slidingView) retryAfter(limit, cost int64) int64 {
	w, e := v.w, v.elapsed
	if v.cur <= limit-cost && v.prev > 0 {
		k := limit - cost - v.cur
		// Refused now, so prev*(w-e) > k*w, hence prev > k and the
		// quotient below is < w.
		at := w - mul(k, w).floorDiv(v.prev, w)
		if at < w {
			return at - e
		}
	}
	k2 := limit - cost
	at := int64(0)
	if v.cur > k2 {
		at = w - mul(k2, w).floorDiv(v.cur, w)
	}
	return w - e + at
}

func expiresSliding(l Limit, s State) int64 {
	return neverAfter(alignDown(s.A, l.WindowMs) + 2*l.WindowMs)
}
