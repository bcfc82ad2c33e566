package window

import "testing"

// Force counts past the limit; the real limit then refuses until the count
// drains the algorithm's own way.
func TestForceCountsPastTheLimit(t *testing.T) {
	const now, w = 1_000_000, 1_000
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket, FixedWindowEpoch} {
		l := Limit{Limit: 5, WindowMs: w}
		_, s := Apply(alg, l, State{}, now, 4)
		s, ok := Force(alg, l, s, now+1, 3) // 7 of 5
		if !ok {
			t.Fatalf("%v: Force refused", alg)
		}
		if r, _ := Apply(alg, l, s, now+2, 1); r.Outcome != Refused {
			t.Fatalf("%v: a hit after forcing 7 of 5: %+v, want refused", alg, r)
		}
		// Well after two windows everything has drained.
		if r, _ := Apply(alg, l, s, now+3*w, 5); r.Outcome != Allowed {
			t.Fatalf("%v: 5 hits three windows later: %+v, want allowed", alg, r)
		}
	}
	if _, ok := Force(FixedWindow, Limit{}, State{}, 1, 1); ok {
		t.Fatal("Force with an invalid limit succeeded")
	}
	if _, ok := Force(Concurrency, Limit{Limit: 5, WindowMs: w}, State{}, 1, 1); ok {
		t.Fatal("Force of a concurrency limit succeeded: it has no window to count in")
	}
}
