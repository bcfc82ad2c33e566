package window

import "testing"

func TestRoomMatchesApply(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket} {
		l := Limit{Limit: 10, WindowMs: 1000, Burst: 7}
		s := State{}
		now := int64(100_000)
		for step := 0; step < 30; step++ {
			room := Room(alg, l, s, now)
			if room > 0 {
				if r, _ := Apply(alg, l, s, now, room); r.Outcome != Allowed {
					t.Fatalf("%v step %d: room %d refused", alg, step, room)
				}
			}
			if r, _ := Apply(alg, l, s, now, room+1); room+1 <= 10 && r.Outcome == Allowed {
				t.Fatalf("%v step %d: room %d but %d allowed", alg, step, room, room+1)
			}
			_, s = Apply(alg, l, s, now, 1)
			now += 97
		}
	}
}

// TestReserveCapsBucket: with 5 tokens held, a bucket refilled for a long
// time has only capacity - 5 tokens (without Reserve it would have all).
func TestReserveCapsBucket(t *testing.T) {
	l := Limit{Limit: 10, WindowMs: 1000}
	_, s := Apply(TokenBucket, l, State{}, 1000, 5) // 5 granted out
	now := int64(10_000)                            // refilled long since
	if got := Room(TokenBucket, l, Reserve(TokenBucket, l, s, now, 5), now); got != 5 {
		t.Fatalf("room with 5 held = %d, want 5", got)
	}
	if got := Room(TokenBucket, l, Reserve(TokenBucket, l, s, now, 0), now); got != 10 {
		t.Fatalf("room with none held = %d, want 10", got)
	}
	// Reserve never gives tokens: an emptier bucket stays as it is.
	_, e := Apply(TokenBucket, l, State{}, now, 10)
	if Reserve(TokenBucket, l, e, now, 3) != e {
		t.Fatal("Reserve changed a bucket already below the cap")
	}
}

func TestRefund(t *testing.T) {
	l := Limit{Limit: 10, WindowMs: 1000}
	_, s := Apply(FixedWindow, l, State{}, 5000, 6)
	if got := Refund(FixedWindow, l, s, 5500, 5000, 4); got.B != 2 {
		t.Fatalf("fixed refund in window: %+v", got)
	}
	if got := Refund(FixedWindow, l, s, 6000, 5000, 4); got != s {
		t.Fatalf("fixed refund after the window ended changed %+v to %+v", s, got)
	}
	if got := Refund(FixedWindow, l, s, 5500, 4999, 4); got != s {
		t.Fatal("fixed refund for another window changed the state")
	}
	_, s = Apply(SlidingWindow, l, State{}, 5100, 6)
	if got := Refund(SlidingWindow, l, s, 5900, 5000, 6); got.B != 0 {
		t.Fatalf("sliding refund in window: %+v", got)
	}
	if got := Refund(SlidingWindow, l, s, 6000, 5000, 6); got != s {
		t.Fatal("sliding refund in the next window changed the state")
	}
	_, s = Apply(TokenBucket, l, State{}, 5000, 10)
	if got := Room(TokenBucket, l, Refund(TokenBucket, l, s, 5000, 0, 4), 5000); got != 4 {
		t.Fatalf("bucket refund of 4: room %d", got)
	}
	if got := Room(TokenBucket, l, Refund(TokenBucket, l, s, 5000, 0, 40), 5000); got != 10 {
		t.Fatalf("bucket refund of 40: room %d, want full (10)", got)
	}
}
