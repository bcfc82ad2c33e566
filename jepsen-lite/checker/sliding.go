package checker

// The sliding-window model. rlnode's sliding window (window W, limit L)
// aligns windows to multiples of W since the epoch; at time now, with
// elapsed = now mod W, previous = the count of the window before the
// current one and current = the current window's count, a hit of cost 1 is
// allowed iff
//
//	previous*(W-elapsed) + (current+1)*W <= L*W
//
// remaining is the largest n >= 0 with previous*(W-elapsed) +
// (current+n)*W <= L*W (after the hit if it counted), resetAt is when the
// estimate reaches 0 (start+2W if current > 0, else start+W if previous >
// 0, else now), and a refused hit's retryAfterMs is the exact time until it
// would be allowed.
//
// The client never sees the FSM's clock, only the answer's aligned window
// start. So the model keeps the counts of the current and previous window
// exactly and, for the time, only the earliest instant the last op can have
// been applied at (kstate.clock). For each answer it finds the elapsed
// times at which the answer is exactly what rlnode must say; all the
// conditions are monotone in elapsed, so they form an interval (a point
// when retryAfterMs pins it), and the op is legal iff the interval is not
// empty. Its lowest point is the new clock.
//
// Unknown hits are spent lazily, as in the fixed-window model: when an
// answer needs more hits than the model knows of, lost ones may have
// counted at the end of the previous window (x of them; judged at its
// last millisecond, when the previous-previous window weighs least) or in
// the current window just before this op (y; judged at this op's time).
// Both are tried for every split, so the model returns a set of states.

// slidingHit returns every state one definite hit can leave.
func slidingHit(l Limit, st kstate, o obs) []kstate {
	if len(o.limits) != 1 {
		return nil // the aligned window start is only in the per-limit detail
	}
	W, lim := l.WindowMs, l.Limit
	r := o.limits[0]
	S := r.WindowStart
	if S <= 0 || S%W != 0 || S < st.a {
		return nil // not an aligned window, or the clock ran backwards
	}
	lost := int64(st.lost)
	var out []kstate
	for x := int64(0); x <= min(lost, lim); x++ {
		prev0, cur, lo, ok := slidingBase(st, S, W, lim, x)
		if !ok {
			break // more lost hits in the previous window only fit worse
		}
		for y := int64(0); x+y <= lost && cur+y <= lim; y++ {
			e, ok := slidingWhen(W, lim, prev0, cur+y, y > 0, lo, S, r, o)
			if !ok {
				continue
			}
			k := st
			k.a, k.b, k.c = S, cur+y, prev0
			if o.counted {
				k.b++
			}
			k.lost = int32(lost - x - y)
			k.clock = S + e
			out = append(out, k)
		}
	}
	return out
}

// slidingBase returns the previous window's count and the current one's
// when the op falls in the window starting at S and x lost hits are spent
// in the window before S, with the lowest elapsed time the op can have.
func slidingBase(st kstate, S, W, lim, x int64) (prev, cur, lo int64, ok bool) {
	switch {
	case st.a == 0:
		return x, 0, 0, x <= lim
	case S == st.a:
		// Lost hits cannot be pushed into the previous window: an
		// earlier answer in this window already saw it.
		return st.c, st.b, st.clock - S, x == 0
	case S == st.a+W:
		// x lost hits at the last millisecond of the model's window.
		return st.b + x, 0, 0, x == 0 || st.c+(st.b+x)*W <= lim*W
	case S == st.a+2*W:
		return x, 0, 0, x == 0 || st.b+x*W <= lim*W
	default:
		return x, 0, 0, x <= lim
	}
}

// slidingWhen returns the lowest elapsed time in [lo, W) at which a hit on
// (prev, cur) gets answer r, or false. lostY says lost hits were counted in
// this window just before the op, so they must have fit then too.
func slidingWhen(W, lim, prev, cur int64, lostY bool, lo, S int64, r LimitResult, o obs) (int64, bool) {
	fits := func(e, n int64) bool { return prev*(W-e)+(cur+n)*W <= lim*W }
	lower, upper := max(lo, 0), W-1
	if lostY {
		lower = max(lower, firstTrue(0, W-1, func(e int64) bool { return fits(e, 0) }))
	}
	fitsFrom := firstTrue(0, W-1, func(e int64) bool { return fits(e, 1) })
	best := int64(-1)
	try := func(lo, hi, after int64, resetAt int64, pin int64) {
		lo, hi = remainingRange(W, lim, prev, after, r.Remaining, lo, hi)
		if pin >= 0 {
			if pin < lo || pin > hi {
				return
			}
			lo = pin
		}
		if lo <= hi && r.ResetAt == resetAt && (best < 0 || lo < best) {
			best = lo
		}
	}
	// unchanged: resetAt when nothing counted (now if the estimate is
	// already 0, which pins the time).
	unchanged := func(lo, hi, after, pin int64) {
		switch {
		case cur > 0:
			try(lo, hi, after, S+2*W, pin)
		case prev > 0:
			try(lo, hi, after, S+W, pin)
		case pin < 0 || pin == r.ResetAt-S:
			try(lo, hi, after, r.ResetAt, r.ResetAt-S)
		}
	}
	if o.allowed {
		lower = max(lower, fitsFrom)
		try(lower, upper, cur+1, S+2*W, -1) // counted, or decided as if it had
		if !o.counted {
			// A hit of a refused request that would have passed:
			// remaining and resetAt may each be told as it stands or
			// as if it had counted (rlnode: remaining as it stands).
			try(lower, upper, cur, S+2*W, -1)
			unchanged(lower, upper, cur, -1)
			unchanged(lower, upper, cur+1, -1)
		}
	} else {
		upper = min(upper, fitsFrom-1)
		pin := int64(-1) // an answer without retryAfterMs pins nothing
		if o.retryAfter != 0 {
			if pin = slidingAllowedAt(W, lim, prev, cur, S) - S - o.retryAfter; pin < 0 {
				return 0, false
			}
		}
		unchanged(lower, upper, cur, pin)
	}
	return best, best >= 0
}

// remainingRange narrows [lo, hi] to the elapsed times at which remaining
// (with after hits in the current window) is rem; remaining only grows
// with elapsed.
func remainingRange(W, lim, prev, after, rem, lo, hi int64) (int64, int64) {
	remAt := func(e int64) int64 { return max(0, (lim*W-prev*(W-e))/W-after) }
	from := firstTrue(lo, hi, func(e int64) bool { return remAt(e) >= rem })
	to := firstTrue(lo, hi, func(e int64) bool { return remAt(e) >= rem+1 }) - 1
	return from, to
}

// slidingAllowedAt is the first instant at which a hit of cost 1 on
// (prev, cur) in the window starting at S is allowed if nothing else
// arrives: in this window, the next one (where cur becomes previous), or
// the one after (empty).
func slidingAllowedAt(W, lim, prev, cur, S int64) int64 {
	if e := firstTrue(0, W-1, func(e int64) bool { return prev*(W-e)+(cur+1)*W <= lim*W }); e < W {
		return S + e
	}
	if e := firstTrue(0, W-1, func(e int64) bool { return cur*(W-e)+W <= lim*W }); e < W {
		return S + W + e
	}
	return S + 2*W
}

// firstTrue returns the smallest e in [lo, hi] with pred(e), or hi+1; pred
// must be monotone (false, then true).
func firstTrue(lo, hi int64, pred func(int64) bool) int64 {
	end := hi + 1
	for lo < end {
		mid := lo + (end-lo)/2
		if pred(mid) {
			end = mid
		} else {
			lo = mid + 1
		}
	}
	return end
}
