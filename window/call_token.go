package window

// CallTokenBucket: gubernator's "token bucket" (its algorithms.go, v2.13.0),
// in integers. A key's window is created by its first call at now and
// holds Limit hits until ExpireAt = now + Duration (with Gregorian: the
// last ms of the calendar period), when all of them come back at once.
//
//   - a hit of Hits <= Remaining takes them; a larger one is refused and
//     takes nothing (DRAIN_OVER_LIMIT: it empties the window);
//   - a hit on an empty window is refused and marks the key over the
//     limit until its window ends (gubernator stores that status and
//     answers it, hits of 0 included);
//   - a new key asked for more than Limit answers over the limit with
//     Remaining = Limit and still opens its window;
//   - a changed Limit moves Remaining by the difference (never below 0);
//   - a changed Duration moves ExpireAt to Start + Duration (Gregorian:
//     the current period's end); if that is already past, the window
//     starts again at now, full;
//   - RESET_REMAINING on a stored key forgets it and answers full with
//     reset time 0 (the hit is not applied, as gubernator does).
func applyCallToken(c Call, s CallState, now int64) (CallResult, CallState) {
	if s.Fresh(now) {
		return newCallToken(c, now)
	}
	if c.ResetRemaining {
		return CallResult{Limit: c.Limit, Remaining: c.Limit, Forget: true}, CallState{}
	}
	if s.Limit != c.Limit {
		s.Remaining = max(s.Remaining+c.Limit-s.Limit, 0)
		s.Limit = c.Limit
	}
	if s.Duration != c.Duration || s.Gregorian != c.Gregorian {
		expire := s.Start + c.Duration
		if c.Gregorian {
			expire = gregorianEnd(now, c.Duration)
		}
		if expire <= now {
			expire = now + c.Duration
			s.Start, s.Remaining = now, s.Limit
		}
		s.ExpireAt, s.Duration, s.Gregorian = expire, c.Duration, c.Gregorian
	}
	r := CallResult{Over: s.Over, Limit: c.Limit, Remaining: s.Remaining, Reset: s.ExpireAt}
	switch {
	case c.Hits == 0:
	case s.Remaining == 0:
		r.Over, s.Over = true, true
	case c.Hits == s.Remaining:
		s.Remaining, r.Remaining = 0, 0
	case c.Hits > s.Remaining:
		r.Over = true
		if c.DrainOverLimit {
			s.Remaining, r.Remaining = 0, 0
		}
	default:
		s.Remaining -= c.Hits
		r.Remaining = s.Remaining
	}
	return r, s
}

func newCallToken(c Call, now int64) (CallResult, CallState) {
	expire := now + c.Duration
	if c.Gregorian {
		expire = gregorianEnd(now, c.Duration)
	}
	s := CallState{Start: now, Remaining: c.Limit - c.Hits, ExpireAt: expire, Limit: c.Limit, Duration: c.Duration, Gregorian: c.Gregorian}
	r := CallResult{Limit: c.Limit, Remaining: s.Remaining, Reset: expire}
	if c.Hits > c.Limit {
		r.Over, r.Remaining, s.Remaining = true, c.Limit, c.Limit
	}
	return r, s
}
