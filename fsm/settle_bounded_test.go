package fsm

import (
	"testing"
	"time"
)

// TestBoundedSettleNeverTakesAKeyPastItsLimit: a settle of 2^40 units
// on a reservation of 1 (issue 35, item 2) charges a 10-per-10 s token
// bucket at most the room it had, so the key allows again within one
// window (a sliding window: as after any full window of hits); the old settle (op 2, kept for logs written before FormatR5)
// still charges it all, as it did.
func TestBoundedSettleNeverTakesAKeyPastItsLimit(t *testing.T) {
	for _, alg := range []string{"token_bucket", "fixed_window", "sliding_window"} {
		t.Run(alg, func(t *testing.T) {
			tf := newTestFSM(t)
			tf.set(pol("tok", alg, lim(10, 10*time.Second)))
			tf.reserve(t0, 1, "a", 60_000, ReserveItem{"tok", "c", 1})
			r, ok := tf.apply(1, EncodeReservation(ReservationEntry{Now: t0 + 1, Op: ReservationSettleBounded, ID: testID(1), Owner: "a", Units: 1 << 40})).(*ReservationResult)
			if !ok || r.Charged[0] > 9 || r.Overdraft < 1<<40-10 {
				t.Fatalf("bounded settle: %+v", r)
			}
			after := int64(10_001)
			if alg == "sliding_window" {
				after = 20_001 // a full window weighs on the next one, as hits do
			}
			if h := tf.check(t0+after, nil, h2("tok", "c", 1)).Hits[0]; !h.Counted {
				t.Fatalf("the key still refuses one window after the settle: %+v", h)
			}
		})
	}
	tf := newTestFSM(t)
	tf.set(pol("tok", "token_bucket", lim(10, 10*time.Second)))
	tf.reserve(t0, 1, "a", 60_000, ReserveItem{"tok", "c", 1})
	if r := tf.settle(t0+1, 1, "a", 1<<40); r.Charged[0] != 1<<40-1 {
		t.Fatalf("the old settle changed meaning: %+v", r)
	}
}

// The bounded settle's entry decodes as written; an op past it is
// corrupt (a release that does not know it halts rather than guess).
func TestBoundedSettleCodec(t *testing.T) {
	e := ReservationEntry{Now: t0, Op: ReservationSettleBounded, ID: testID(7), Owner: "addr-127.0.0.1", Units: 1 << 40}
	got, err := decodeReservation(EncodeReservation(e))
	if err != nil || got.Op != e.Op || got.Units != e.Units || got.ID != e.ID || got.Owner != e.Owner || !got.Op.IsSettle() {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	e.Op = ReservationSettleBounded + 1
	if _, err := decodeReservation(EncodeReservation(e)); err == nil {
		t.Fatal("an unknown reservation op decoded")
	}
}
