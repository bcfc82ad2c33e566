package window

// fixed_window: State{A: window start, B: count, C: 0}, the window anchored
// at the key's first hit, decided by Decide (semantics in doc.go).

// fixedState is s read within the domain Decide cannot overflow in: the
// start clamped into [0, MaxTime] and a negative count read as 0.
func fixedState(s State) (start, count int64) {
	return clampTime(s.A), max(s.B, 0)
}

func applyFixed(l Limit, s State, now, cost int64) (Result, State) {
	start, count := fixedState(s)
	d := Decide(start, count, now, l.WindowMs, l.Limit, cost)
	r := Result{
		Outcome:     d.Outcome,
		Limit:       l.Limit,
		WindowMs:    l.WindowMs,
		Remaining:   d.Remaining,
		ResetAt:     d.ResetAt,
		WindowStart: d.WindowStart,
	}
	switch d.Outcome {
	case Allowed:
		return r, State{A: d.WindowStart, B: d.Count}
	case Refused:
		// Refused means the window is not fresh (now - start < window), so
		// the wait is at least 1 ms; at ResetAt the window is fresh and a
		// cost <= limit fits.
		r.RetryAfterMs = d.ResetAt - now
	default:
		r.RetryAfterMs = -1
	}
	return r, s
}

func expiresFixed(l Limit, s State) int64 {
	start, _ := fixedState(s)
	return neverAfter(start + l.WindowMs)
}
