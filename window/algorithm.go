package window

import (
	"errors"
	"fmt"
	"time"
)

// Algorithm names how a policy turns hits into decisions.
type Algorithm uint8

const (
	// FixedWindow is the window anchored at each key's first hit (Decide).
	FixedWindow Algorithm = 1
	// SlidingWindow is the estimate over epoch-aligned windows.
	SlidingWindow Algorithm = 2
	// TokenBucket is a bucket refilled continuously, kept as GCRA.
	TokenBucket Algorithm = 3
	// FixedWindowEpoch is the fixed window aligned to the epoch: windows at
	// multiples of the window length since the Unix epoch, the same for
	// every key. Policies spell it fixed_window with align: epoch, so
	// ParseAlgorithm does not know this name.
	FixedWindowEpoch Algorithm = 4
	// Concurrency is not a window: a policy of at most Limit permits live
	// at once per key (the state machine's permits). Apply and ExpiresAt
	// allow nothing for it; a hit never decides a concurrency policy.
	Concurrency Algorithm = 5
	// FixedWindowCalendar is the fixed window aligned to the calendar:
	// local days, ISO weeks, months or years in the limit's zone
	// (fixed_calendar.go). Policies spell it fixed_window with align:
	// calendar, so ParseAlgorithm does not know this name.
	FixedWindowCalendar Algorithm = 6
)

// ErrUnknownAlgorithm is returned by ParseAlgorithm for a name it does not know.
var ErrUnknownAlgorithm = errors.New("unknown algorithm")

// String is the algorithm's name as users write it in a policy.
func (a Algorithm) String() string {
	switch a {
	case FixedWindow:
		return "fixed_window"
	case SlidingWindow:
		return "sliding_window"
	case TokenBucket:
		return "token_bucket"
	case FixedWindowEpoch:
		return "fixed_window(epoch)"
	case Concurrency:
		return "concurrency"
	case FixedWindowCalendar:
		return "fixed_window(calendar)"
	case CallTokenBucket:
		return "token_bucket(gubernator)"
	case LeakyBucket:
		return "leaky_bucket"
	default:
		return fmt.Sprintf("algorithm(%d)", uint8(a))
	}
}

// ParseAlgorithm reads the name String gives back.
func ParseAlgorithm(s string) (Algorithm, error) {
	switch s {
	case "fixed_window":
		return FixedWindow, nil
	case "sliding_window":
		return SlidingWindow, nil
	case "token_bucket":
		return TokenBucket, nil
	case "concurrency":
		return Concurrency, nil
	}
	return 0, fmt.Errorf("%w %q (want fixed_window, sliding_window, token_bucket or concurrency)", ErrUnknownAlgorithm, s)
}

// MaxTime bounds every instant and length the algorithms compute with, in
// Unix milliseconds (about 73 million years): now and stored instants are
// clamped into [0, MaxTime] and WindowMs to at most MaxTime, so sums such as
// start + 2*window never wrap. Real clocks and validated policies are far
// inside it.
const MaxTime int64 = 1 << 61

// Limit is one limit of a policy: Limit hits (token bucket: tokens) per
// WindowMs milliseconds. Burst is the token bucket's capacity (0 or less
// means Limit); the other algorithms ignore it. Loc is a calendar limit's
// zone (FixedWindowCalendar; nil is UTC); the other algorithms ignore it.
type Limit struct {
	Limit, WindowMs, Burst int64
	Loc                    *time.Location
}

// State is one limit's stored state for one key; the zero value is a
// never-seen key. Its meaning per algorithm:
//
//	fixed_window:   A = window start (anchored at the key's first hit), B = count, C = 0
//	fixed_window (epoch): A = the aligned window start, B = count, C = 0
//	fixed_window (calendar): A = the period's start, B = count, C = the period's end
//	sliding_window: A = current aligned window start, B = its count, C = the previous window's count
//	token_bucket:   A = theoretical arrival time (TAT) in whole ms, B = its fraction in units of
//	                1/C ms (0 <= B < C), C = the Limit the fraction was written with
type State struct{ A, B, C int64 }

// Result is one limit's answer to one hit.
type Result struct {
	Outcome Outcome
	// Limit is the limit as configured (token bucket: the capacity, Burst or Limit).
	Limit    int64
	WindowMs int64
	// Remaining is the whole hits of cost 1 still allowed now, after this
	// hit if it was allowed.
	Remaining int64
	// ResetAt is a Unix ms instant; its meaning is per algorithm (doc.go).
	ResetAt int64
	// RetryAfterMs is 0 when allowed, the exact wait in ms (>= 1) until a hit
	// of the same cost would be allowed if nothing else arrived when
	// refused, and -1 when CostExceedsLimit (never).
	RetryAfterMs int64
	// WindowStart is the fixed window's anchored start, the sliding
	// window's current aligned start, 0 for a token bucket.
	WindowStart int64
}

// Apply decides one hit of cost (below 1 counts as 1) at now (Unix ms, the
// FSM's clamped clock) and returns the result and the state the key has if
// the hit counts. When Outcome != Allowed the returned state is s itself: a
// refused hit changes nothing. A limit outside the validated domain
// (Limit < 1 or WindowMs < 1) or an unknown algorithm allows nothing: the
// outcome is CostExceedsLimit. Apply never panics and never overflows.
func Apply(alg Algorithm, l Limit, s State, now, cost int64) (Result, State) {
	cost = max(cost, 1)
	now = clampTime(now)
	if l.Limit < 1 || l.WindowMs < 1 {
		return never(l, now), s
	}
	l.WindowMs = min(l.WindowMs, MaxTime)
	switch alg {
	case FixedWindow:
		return applyFixed(l, s, now, cost)
	case SlidingWindow:
		return applySliding(l, s, now, cost)
	case TokenBucket:
		return applyBucket(l, s, now, cost)
	case FixedWindowEpoch:
		return applyFixedEpoch(l, s, now, cost)
	case FixedWindowCalendar:
		return applyFixedCalendar(l, s, now, cost)
	}
	return never(l, now), s
}

// Peek describes the key at now without a hit: Remaining, ResetAt and
// WindowStart as they stand, and Outcome and RetryAfterMs as a hit of cost 1
// would get them. It changes nothing (for status reads).
func Peek(alg Algorithm, l Limit, s State, now int64) Result {
	one, _ := Apply(alg, l, s, now, 1)
	// A cost no limit allows decides nothing and reports the state as is.
	p, _ := Apply(alg, l, s, now, maxInt64)
	p.Outcome, p.RetryAfterMs = one.Outcome, one.RetryAfterMs
	return p
}

// ExpiresAt is the Unix ms instant from which s can no longer affect any
// decision: from then on Apply decides exactly as for the zero State, so the
// FSM may drop it. fixed_window: start + window; sliding_window: current
// start + 2*window; token_bucket: when the bucket is full again. MaxInt64
// (a state past MaxTime) means never, the clamped clock never gets there. It is
// MinInt64 for an invalid limit or unknown algorithm (nothing is ever
// allowed whatever the state).
func ExpiresAt(alg Algorithm, l Limit, s State) int64 {
	if l.Limit < 1 || l.WindowMs < 1 {
		return -maxInt64 - 1
	}
	l.WindowMs = min(l.WindowMs, MaxTime)
	switch alg {
	case FixedWindow:
		return expiresFixed(l, s)
	case SlidingWindow:
		return expiresSliding(l, s)
	case TokenBucket:
		return expiresBucket(l, s)
	case FixedWindowEpoch:
		return expiresFixedEpoch(l, s)
	case FixedWindowCalendar:
		return expiresFixedCalendar(l, s)
	}
	return -maxInt64 - 1
}

// MostConstraining picks the index of the part a response describes: the
// least Remaining, ties to the latest ResetAt, then to the first. It is -1
// for no parts.
func MostConstraining(parts []Result) int {
	best := -1
	for i, p := range parts {
		if best < 0 || p.Remaining < parts[best].Remaining ||
			(p.Remaining == parts[best].Remaining && p.ResetAt > parts[best].ResetAt) {
			best = i
		}
	}
	return best
}

// never is the answer for a hit that no wait can make allowed.
func never(l Limit, now int64) Result {
	return Result{Outcome: CostExceedsLimit, Limit: l.Limit, WindowMs: l.WindowMs, ResetAt: now, RetryAfterMs: -1}
}

// neverAfter maps an expiry past MaxTime, which a clamped clock never
// reaches, to MaxInt64: kept for good.
func neverAfter(t int64) int64 {
	if t > MaxTime {
		return maxInt64
	}
	return t
}

func clampTime(t int64) int64 { return min(max(t, 0), MaxTime) }

// forceLimit stands in for a limit that always has room (Force).
const forceLimit = int64(1) << 62

// Force returns the state a hit of cost leaves at now whatever the limit:
// an admin charging work done elsewhere. The count may pass the limit, and
// later hits are refused until it drains as the algorithm drains any count
// (a fixed window's next window, a sliding window's weight, a bucket's
// refill, at most MaxRefillMs). ok is false, and s returned, only for an
// invalid limit or algorithm or a count already beyond any use.
func Force(alg Algorithm, l Limit, s State, now, cost int64) (ns State, ok bool) {
	if l.Limit < 1 || l.WindowMs < 1 {
		return s, false
	}
	switch alg {
	case FixedWindow, SlidingWindow, FixedWindowEpoch, FixedWindowCalendar:
		// The count is kept as is: a higher limit only lets it grow.
		l.Limit = max(l.Limit, forceLimit)
	case TokenBucket:
		// The refill rate (Limit per WindowMs) and the fraction's unit
		// stay; only the bucket's depth grows, up to MaxRefillMs.
		l.Burst = maxInt64
	default:
		return s, false
	}
	r, ns := Apply(alg, l, s, now, cost)
	return ns, r.Outcome == Allowed
}
