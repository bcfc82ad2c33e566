package window

// Outcome says what Decide made of a hit.
type Outcome uint8

const (
	// Allowed means the hit fits in the window and was counted.
	Allowed Outcome = iota + 1
	// Refused means the window is spent; the hit was not counted and a retry
	// after ResetAt may succeed.
	Refused
	// CostExceedsLimit means the hit can never be allowed, in this window or
	// any other, because its cost is larger than the limit. It is not counted
	// and retrying is pointless.
	CostExceedsLimit
)

// String names the outcome as it appears in metrics and logs.
func (o Outcome) String() string {
	switch o {
	case Allowed:
		return "allowed"
	case Refused:
		return "refused"
	case CostExceedsLimit:
		return "cost_exceeds_limit"
	default:
		return "unknown"
	}
}

// Decision is the result of one hit and the window state it leaves behind.
type Decision struct {
	Outcome Outcome
	// WindowStart and Count describe the window the hit fell in, after the
	// hit. Only an allowed hit changes state: callers store them when
	// Outcome is Allowed and otherwise keep the previous window untouched
	// (a refused hit on a lapsed window must not open a new one).
	WindowStart int64
	Count       int64
	// Remaining is Limit - Count: the hits of cost 1 still allowed in the window.
	Remaining int64
	// ResetAt is WindowStart + WindowMs, in Unix milliseconds.
	ResetAt int64
}

// Allowed reports whether the hit was admitted.
func (d Decision) Allowed() bool { return d.Outcome == Allowed }

// RetryAfterMs is how long a refused caller should wait before the window
// resets, measured from now. It is 0 for an allowed hit and for a hit that
// can never be allowed.
func (d Decision) RetryAfterMs(now int64) int64 {
	if d.Outcome != Refused {
		return 0
	}
	if wait := d.ResetAt - now; wait > 0 {
		return wait
	}
	return 0
}

// Decide applies one hit of the given cost at time now to the window
// (prevStart, prevCount). All times are Unix milliseconds. A never-seen
// client is prevStart = 0, prevCount = 0. A cost below 1 counts as 1.
//
// A hit opens a fresh window at now when the previous one has lapsed
// (now - prevStart >= windowMs). A refused hit is not counted, so a client
// hammering a spent window does not push its own reset further away.
//
// Callers validate windowMs > 0 and limit > 0 before anything reaches the log;
// Decide still never panics on other values.
func Decide(prevStart, prevCount, now, windowMs, limit, cost int64) Decision {
	if cost < 1 {
		cost = 1
	}
	start, used := prevStart, prevCount
	if now-prevStart >= windowMs {
		start, used = now, 0
	}
	d := Decision{WindowStart: start, Count: used, ResetAt: start + windowMs}
	switch {
	case cost > limit:
		d.Outcome = CostExceedsLimit
	case used <= limit-cost:
		d.Outcome = Allowed
		d.Count = used + cost
	default:
		d.Outcome = Refused
	}
	d.Remaining = limit - d.Count
	if d.Remaining < 0 {
		d.Remaining = 0
	}
	return d
}
