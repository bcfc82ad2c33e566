package window

// TEMPORARY stand-in for the issue-9 window contract (window-contract.md),
// fixed window only, so the pol branch builds before the win branch lands.
// Deleted when main brings the real implementation.

import "fmt"

type Algorithm uint8

const (
	FixedWindow   Algorithm = 1
	SlidingWindow Algorithm = 2
	TokenBucket   Algorithm = 3
)

func (a Algorithm) String() string {
	switch a {
	case FixedWindow:
		return "fixed_window"
	case SlidingWindow:
		return "sliding_window"
	case TokenBucket:
		return "token_bucket"
	}
	return "unknown"
}

func ParseAlgorithm(s string) (Algorithm, error) {
	for _, a := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket} {
		if a.String() == s {
			return a, nil
		}
	}
	return 0, fmt.Errorf("unknown algorithm %q", s)
}

type Limit struct{ Limit, WindowMs, Burst int64 }

type State struct{ A, B, C int64 }

type Result struct {
	Outcome      Outcome
	Limit        int64
	WindowMs     int64
	Remaining    int64
	ResetAt      int64
	RetryAfterMs int64
	WindowStart  int64
}

func Apply(alg Algorithm, l Limit, s State, now, cost int64) (Result, State) {
	d := Decide(s.A, s.B, now, l.WindowMs, l.Limit, cost)
	r := Result{Outcome: d.Outcome, Limit: l.Limit, WindowMs: l.WindowMs, Remaining: d.Remaining, ResetAt: d.ResetAt, WindowStart: d.WindowStart}
	switch d.Outcome {
	case Allowed:
		return r, State{A: d.WindowStart, B: d.Count}
	case Refused:
		r.RetryAfterMs = d.RetryAfterMs(now)
	default:
		r.RetryAfterMs = -1
	}
	return r, s
}

func ExpiresAt(alg Algorithm, l Limit, s State) int64 { return s.A + l.WindowMs }

func MostConstraining(parts []Result) int {
	best := 0
	for i := 1; i < len(parts); i++ {
		p, b := parts[i], parts[best]
		if p.Remaining < b.Remaining || (p.Remaining == b.Remaining && p.ResetAt > b.ResetAt) {
			best = i
		}
	}
	return best
}
