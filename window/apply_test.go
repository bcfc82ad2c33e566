package window

import (
	"errors"
	"testing"
)

// checkApply checks what must hold for any single decision: the outcome is
// one of three, Remaining is never negative, a hit that does not count
// returns the state it was given, RetryAfterMs is 0 / >= 1 / -1 by outcome,
// an allowed hit leaves a state that still matters now, and after ExpiresAt
// the stored state decides exactly as a never-seen key. When exact is set
// (s is a state Apply itself produced on a clock that never ran backwards)
// it also checks that RetryAfterMs is exact: allowed at now+retryAfter,
// refused one ms earlier.
func checkApply(t testing.TB, alg Algorithm, l Limit, s State, now, cost int64, exact bool) (Result, State) {
	t.Helper()
	r, ns := Apply(alg, l, s, now, cost)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("Apply(%v, %+v, %+v, now=%d, cost=%d) = %+v, %+v: "+format,
			append([]any{alg, l, s, now, cost, r, ns}, args...)...)
	}
	if r.Remaining < 0 {
		fail("negative remaining")
	}
	valid := l.Limit >= 1 && l.WindowMs >= 1
	capy := l.Limit
	if alg == TokenBucket && valid {
		lc := l
		lc.WindowMs = min(lc.WindowMs, MaxTime)
		capy = capacity(lc)
	}
	switch r.Outcome {
	case Allowed:
		if r.RetryAfterMs != 0 {
			fail("allowed with retryAfter %d", r.RetryAfterMs)
		}
		if e := ExpiresAt(alg, l, ns); e <= clampTime(now) && clampTime(now) < MaxTime {
			fail("the new state already expired at %d", e)
		}
	case Refused:
		if ns != s {
			fail("a refused hit changed the state")
		}
		if r.RetryAfterMs < 1 {
			fail("refused with retryAfter %d", r.RetryAfterMs)
		}
		if exact && r.RetryAfterMs <= MaxTime-clampTime(now) {
			at := clampTime(now) + r.RetryAfterMs
			if r2, _ := Apply(alg, l, s, at, cost); r2.Outcome != Allowed {
				fail("still refused at now+retryAfter: %+v", r2)
			}
			if r2, _ := Apply(alg, l, s, at-1, cost); r2.Outcome != Refused {
				fail("not refused at now+retryAfter-1: %+v", r2)
			}
		}
	case CostExceedsLimit:
		if ns != s {
			fail("a never-allowed hit changed the state")
		}
		if r.RetryAfterMs != -1 {
			fail("never-allowed with retryAfter %d", r.RetryAfterMs)
		}
		if valid && (alg == FixedWindow || alg == FixedWindowEpoch || alg == SlidingWindow || alg == TokenBucket) && max(cost, 1) <= capy {
			fail("cost %d within capacity %d was called never allowed", cost, capy)
		}
	default:
		fail("unknown outcome")
	}
	if valid && max(cost, 1) > capy && r.Outcome != CostExceedsLimit {
		fail("cost above capacity %d was not CostExceedsLimit", capy)
	}
	if p := Peek(alg, l, s, now); max(cost, 1) == 1 &&
		(p.Outcome != r.Outcome || p.RetryAfterMs != r.RetryAfterMs || p.WindowStart != r.WindowStart ||
			(r.Outcome == Allowed && p.Remaining != r.Remaining+1) || (r.Outcome != Allowed && p != r)) {
		fail("Peek %+v disagrees with a hit of cost 1", p)
	}
	if e := ExpiresAt(alg, l, s); e <= MaxTime {
		at := max(clampTime(now), e)
		rs, ss := Apply(alg, l, s, at, cost)
		rz, sz := Apply(alg, l, State{}, at, cost)
		if rs != rz || (rs.Outcome == Allowed && ss != sz) {
			fail("at ExpiresAt %d the stored state decides %+v %+v, a fresh key %+v %+v", at, rs, ss, rz, sz)
		}
	}
	return r, ns
}

// small maps any fuzzed int64 into [0, m): raw fuzz inputs are mostly
// huge, so each target also checks a variant folded into realistic ranges
// where hits are allowed, refused and retried.
func small(x, m int64) int64 { return int64(uint64(x) % uint64(m)) }

func TestAlgorithmNames(t *testing.T) {
	for _, a := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket} {
		got, err := ParseAlgorithm(a.String())
		if err != nil || got != a {
			t.Fatalf("ParseAlgorithm(%q) = %v, %v", a.String(), got, err)
		}
	}
	if _, err := ParseAlgorithm("leaky_bucket"); !errors.Is(err, ErrUnknownAlgorithm) {
		t.Fatalf("ParseAlgorithm(leaky_bucket) error %v, want ErrUnknownAlgorithm", err)
	}
	if s := Algorithm(9).String(); s != "algorithm(9)" {
		t.Fatalf("Algorithm(9).String() = %q", s)
	}
}

func TestApplyOutsideTheDomainAllowsNothing(t *testing.T) {
	s := State{A: 5, B: 1, C: 2}
	for _, c := range []struct {
		alg Algorithm
		l   Limit
	}{
		{FixedWindow, Limit{Limit: 0, WindowMs: 1000}},
		{SlidingWindow, Limit{Limit: -3, WindowMs: 1000}},
		{TokenBucket, Limit{Limit: 10, WindowMs: 0}},
		{SlidingWindow, Limit{Limit: 10, WindowMs: -1 << 63}},
		{Algorithm(0), Limit{Limit: 10, WindowMs: 1000}},
		{Algorithm(42), Limit{Limit: 10, WindowMs: 1000}},
	} {
		r, ns := Apply(c.alg, c.l, s, 1_000_000, 1)
		if r.Outcome != CostExceedsLimit || r.RetryAfterMs != -1 || ns != s {
			t.Errorf("Apply(%v, %+v) = %+v, %+v; want CostExceedsLimit, retry -1, state unchanged", c.alg, c.l, r, ns)
		}
	}
}

func TestMostConstraining(t *testing.T) {
	cases := []struct {
		name  string
		parts []Result
		want  int
	}{
		{"none", nil, -1},
		{"one", []Result{{Remaining: 3}}, 0},
		{"least remaining", []Result{{Remaining: 3, ResetAt: 9}, {Remaining: 1, ResetAt: 2}, {Remaining: 2, ResetAt: 99}}, 1},
		{"tie to the latest reset", []Result{{Remaining: 0, ResetAt: 1_000}, {Remaining: 0, ResetAt: 86_400_000}, {Remaining: 5}}, 1},
		{"full tie to the first", []Result{{Remaining: 0, ResetAt: 7}, {Remaining: 0, ResetAt: 7}}, 0},
	}
	for _, c := range cases {
		if got := MostConstraining(c.parts); got != c.want {
			t.Errorf("%s: MostConstraining = %d, want %d", c.name, got, c.want)
		}
	}
}
