package fsm

import (
	"testing"
	"time"

	"github.com/rlnode/rlnode/policy"
)

func (tf *testFSM) reserve(now int64, id int, owner string, ttlMs int64, items ...ReserveItem) *ReservationResult {
	tf.t.Helper()
	r, ok := tf.apply(1, EncodeReservation(ReservationEntry{Now: now, Op: ReservationReserve, ID: testID(id), Owner: owner, TTLMs: ttlMs, Items: items})).(*ReservationResult)
	if !ok {
		tf.t.Fatalf("reserve did not return *ReservationResult (fatal %v)", tf.fatal)
	}
	return r
}

func (tf *testFSM) settle(now int64, id int, owner string, units int64) *ReservationResult {
	tf.t.Helper()
	r, ok := tf.apply(1, EncodeReservation(ReservationEntry{Now: now, Op: ReservationSettle, ID: testID(id), Owner: owner, Units: units})).(*ReservationResult)
	if !ok {
		tf.t.Fatalf("settle did not return *ReservationResult (fatal %v)", tf.fatal)
	}
	return r
}

func TestReserveIsAllOrNothing(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(pol("in", "fixed_window", lim(100, time.Minute)), pol("usd", "sliding_window", lim(10, time.Hour)))
	r := tf.reserve(t0, 1, "a", 1000, ReserveItem{"in", "c", 50}, ReserveItem{"usd", "c", 11})
	if r.Reserved || r.Hits[0].Counted || r.Hits[1].Counted {
		t.Fatalf("reserved past one key's limit: %+v", r)
	}
	if r := tf.check(t0, nil, h2("in", "c", 100)).Hits[0]; !r.Counted {
		t.Fatal("a refused reservation charged the other key")
	}
	if r := tf.reserve(t0, 2, "a", 1000, ReserveItem{"usd", "c", 10}); !r.Reserved || r.Exp != t0+1000 {
		t.Fatalf("reserve: %+v", r)
	}
	if r := tf.check(t0, nil, h2("usd", "c", 1)).Hits[0]; r.Counted {
		t.Fatal("reserved units were not counted at once")
	}
	tf.set(conc("jobs", 1), leased(pol("ls", "fixed_window", lim(5, time.Second))))
	for i, name := range []string{"nope", "jobs", "ls"} {
		r := tf.reserve(t0, 3, "a", 1000, ReserveItem{"in", "c", 1}, ReserveItem{name, "c", 1})
		if r.Reserved || r.Item != 1 || r.Reason == "" {
			t.Fatalf("%d: reserve of %s: %+v", i, name, r)
		}
	}
}

func TestSettleGivesBackOrChargesTheDifference(t *testing.T) {
	for _, alg := range []string{"fixed_window", "fixed_window+epoch", "sliding_window", "token_bucket"} {
		t.Run(alg, func(t *testing.T) {
			tf := newTestFSM(t)
			p := leasedVariant("tok", alg, lim(100, time.Minute))
			p.Consistency = "" // strict: reservations need it
			tf.set(p)
			tf.reserve(t0, 1, "a", 10_000, ReserveItem{"tok", "c", 60})
			r := tf.settle(t0+10, 1, "a", 25)
			if r.NotFound || r.Refunded[0] != 35 || r.Charged[0] != 0 {
				t.Fatalf("settle 25 of 60: %+v", r)
			}
			// 25 spent: 75 left, not 76.
			if r := tf.check(t0+10, nil, h2("tok", "c", 76)).Hits[0]; r.Counted {
				t.Fatal("settle gave back more than U - actual")
			}
			if r := tf.check(t0+10, nil, h2("tok", "c", 75)).Hits[0]; !r.Counted {
				t.Fatal("settle did not give back U - actual")
			}
			if r := tf.settle(t0+11, 1, "a", 25); !r.AlreadySettled {
				t.Fatalf("second settle: %+v", r)
			}
			// Overdraft: 100 used, a reservation of 0 cannot exist, so
			// reserve on a fresh key and settle at more than the limit.
			tf.reserve(t0+20, 2, "a", 10_000, ReserveItem{"tok", "d", 90})
			r = tf.settle(t0+30, 2, "a", 130)
			if r.Charged[0] != 40 || r.Overdraft != 30 {
				t.Fatalf("settle 130 of 90: %+v, want 40 charged, 30 over", r)
			}
			if r := tf.check(t0+30, nil, h2("tok", "d", 1)).Hits[0]; r.Counted {
				t.Fatal("an overdrawn key allowed a hit")
			}
		})
	}
}

func TestSettleOnlyWithinTheWindowAndTheTTL(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(pol("tok", "fixed_window", lim(100, time.Second)))
	tf.reserve(t0, 1, "a", 60_000, ReserveItem{"tok", "c", 60})
	tf.check(t0+1000, nil, h2("tok", "c", 10)) // a new window
	if r := tf.settle(t0+1001, 1, "a", 0); r.NotFound || r.Refunded[0] != 0 {
		t.Fatalf("settle after the window ended gave back %+v", r)
	}
	if r := tf.check(t0+1001, nil, h2("tok", "c", 91)).Hits[0]; r.Counted {
		t.Fatal("a late settle gave units back to the next window")
	}
	// Unsettled by its TTL: dropped, stays charged, a settle is not found.
	tf.reserve(t0+2000, 2, "a", 500, ReserveItem{"tok", "e", 70})
	if r := tf.settle(t0+2500, 2, "a", 0); !r.NotFound {
		t.Fatalf("settle at the TTL: %+v", r)
	}
	if r := tf.check(t0+2500, nil, h2("tok", "e", 31)).Hits[0]; r.Counted {
		t.Fatal("an expired reservation was given back")
	}
	if rs := tf.f.Reservations(); len(rs) != 1 || rs[0].ID != testID(1) || !rs[0].Settled {
		t.Fatalf("stored reservations %+v, want only the settled one until its TTL", rs)
	}
	// Another owner cannot settle.
	tf.reserve(t0+3000, 3, "a", 500, ReserveItem{"tok", "f", 70})
	if r := tf.settle(t0+3001, 3, "b", 0); !r.NotFound {
		t.Fatalf("settled by another owner: %+v", r)
	}
}

func TestReservationsAreBounded(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(pol("tok", "fixed_window", lim(1<<40, time.Hour)))
	for i := range MaxReservations {
		tf.f.reservations[testID(1_000_000_000+i)] = &reservation{exp: t0 + 1000}
	}
	if r := tf.reserve(t0, 1, "a", 1000, ReserveItem{"tok", "c", 1}); !r.Full || r.Reserved {
		t.Fatalf("reserve past the bound: %+v", r)
	}
	if r := tf.check(t0, nil, h2("tok", "c", 1<<40)).Hits[0]; !r.Counted {
		t.Fatal("the refused reservation charged")
	}
}

// A reset forgets the key's count, the reserved units with it: a settle
// after it must not refund them from hits counted after the reset. Window
// starts alone cannot tell (aligned windows reopen at the same start, a
// token bucket has none). (Failed before the fix: the settle took 10 off
// the 10 hits counted after the reset, and 10 more were allowed.)
func TestSettleAfterAResetRefundsNothing(t *testing.T) {
	for _, alg := range []string{"fixed_window+epoch", "sliding_window", "token_bucket"} {
		t.Run(alg, func(t *testing.T) {
			tf := newTestFSM(t)
			p := leasedVariant("tok", alg, lim(10, time.Hour))
			p.Consistency = ""
			tf.set(p)
			if r := tf.reserve(t0, 1, "a", 10_000, ReserveItem{"tok", "c", 10}); !r.Reserved {
				t.Fatalf("reserve: %+v", r)
			}
			if r := tf.apply(1, EncodeResetKey("tok", "c")).(*ResetResult); !r.Found {
				t.Fatal("reset found no state")
			}
			if r := tf.check(t0+1, nil, h2("tok", "c", 10)).Hits[0]; !r.Counted {
				t.Fatal("the reset key did not start afresh")
			}
			if r := tf.settle(t0+2, 1, "a", 0); r.NotFound || r.Refunded[0] != 0 {
				t.Fatalf("settle after a reset refunded: %+v", r)
			}
			if r := tf.check(t0+3, nil, h2("tok", "c", 1)).Hits[0]; r.Counted {
				t.Fatal("11 units allowed within the window after the reset (limit 10)")
			}
		})
	}
}

// A policy changed in place (same incarnation) to another algorithm or
// window length starts its keys afresh; a settle must not refund the
// reserved units from the fresh state, whose aligned window may reopen at
// the reserve's start. (Failed before the fix: Refunded 10, and 20 units
// were allowed within the hour against a limit of 10.)
func TestSettleAfterAReshapeRefundsNothing(t *testing.T) {
	hour := int64(time.Hour / time.Millisecond)
	at := t0 - t0%hour + 30_000 // in the hour's first minute: both alignments agree
	epochPol := func(w time.Duration) policy.Policy {
		p := leasedVariant("tok", "fixed_window+epoch", lim(10, w))
		p.Consistency = ""
		return p
	}
	for name, after := range map[string]policy.Policy{
		"to token_bucket": pol("tok", "token_bucket", lim(10, time.Hour)),
		"to 1m windows":   epochPol(time.Minute),
	} {
		t.Run(name, func(t *testing.T) {
			tf := newTestFSM(t)
			tf.set(epochPol(time.Hour))
			if r := tf.reserve(at, 1, "a", 10_000, ReserveItem{"tok", "c", 10}); !r.Reserved {
				t.Fatalf("reserve: %+v", r)
			}
			if r := tf.set(after); r.Changes[0] != "changed" {
				t.Fatalf("set: %+v", r)
			}
			if r := tf.check(at+1, nil, h2("tok", "c", 10)).Hits[0]; !r.Counted {
				t.Fatal("the reshaped policy did not start afresh")
			}
			if r := tf.settle(at+2, 1, "a", 0); r.NotFound || r.Refunded[0] != 0 {
				t.Fatalf("settle after a reshape refunded: %+v", r)
			}
			if r := tf.check(at+3, nil, h2("tok", "c", 1)).Hits[0]; r.Counted {
				t.Fatal("11 units allowed after the reshape (limit 10)")
			}
		})
	}
}
