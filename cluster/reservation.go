package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/policy"
	"github.com/rlnode/rlnode/window"
)

// ReserveItem charges Units to (Policy, Client).
type ReserveItem = fsm.ReserveItem

// MaxReservationKeys bounds the keys of one reservation.
const MaxReservationKeys = fsm.MaxReservationItems

// ReserveRequest charges every item at once, all or nothing, for TTL (0:
// DefaultPermitTTL, at most the node's bound), bound to Owner. Single
// says the caller named one key without a list: fields are then named
// "policy", not "keys[0].policy".
type ReserveRequest struct {
	Owner  string        `json:"owner"`
	TTL    time.Duration `json:"ttl"`
	Items  []ReserveItem `json:"items"`
	Single bool          `json:"single,omitempty"`
}

// at is the name prefix of item i's fields.
func at(single bool, i int) string {
	if single {
		return ""
	}
	return fmt.Sprintf("keys[%d].", i)
}

// ReservedKey is one key of a reservation: the decision on its units.
type ReservedKey struct {
	Policy string `json:"policy"`
	Client string `json:"client"`
	Units  int64  `json:"units"`
	// Allowed: this key had room (the reservation is made only if every
	// key had). Remaining, ResetAt and RetryAfterMs describe its most
	// constraining limit (RetryAfterMs -1: the units exceed what the
	// policy could ever allow).
	Allowed      bool  `json:"allowed"`
	Remaining    int64 `json:"remaining"`
	ResetAt      int64 `json:"resetAt"`
	RetryAfterMs int64 `json:"retryAfterMs"`
}

// Reservation is the cluster's answer to a reserve.
type Reservation struct {
	// ID names the reservation when Reserved.
	ID        string        `json:"reservation,omitempty"`
	Reserved  bool          `json:"reserved"`
	Now       int64         `json:"now"`
	ExpiresAt int64         `json:"expiresAt,omitempty"`
	Keys      []ReservedKey `json:"keys"`
}

// Settlement is the cluster's answer to a settle: per key the units given
// back (U - actual, to the window they were charged in; 0 when it ended)
// and charged (actual - U), and the Overdraft no limit had room for.
type Settlement struct {
	ID        string  `json:"reservation"`
	Actual    int64   `json:"units"`
	Reserved  []int64 `json:"reserved"`
	Refunded  []int64 `json:"refunded"`
	Charged   []int64 `json:"charged"`
	Overdraft int64   `json:"overdraft"`
	Now       int64   `json:"now"`
}

// reservationWire is the body of the leader operation "reservation".
type reservationWire struct {
	Op    fsm.ReservationOp `json:"op"`
	ID    string            `json:"id,omitempty"`
	Owner string            `json:"owner,omitempty"`
	TTLMs int64             `json:"ttlMs,omitempty"`
	Items []ReserveItem     `json:"items,omitempty"`
	Units int64             `json:"units,omitempty"`
	// Single: fields are named without the keys[i]. prefix (an older
	// leader leaves it out of its messages only).
	Single bool `json:"single,omitempty"`
}

// reservationAnswer is the answer of the leader operation: one of the two.
type reservationAnswer struct {
	Reservation *Reservation `json:"reservation,omitempty"`
	Settlement  *Settlement  `json:"settlement,omitempty"`
}

// check guards the internal endpoint: w as the entry would be.
func (w reservationWire) check() error {
	e := fsm.ReservationEntry{Now: 1, Op: w.Op, ID: w.ID, Owner: w.Owner, TTLMs: w.TTLMs, Items: w.Items, Units: w.Units}
	if w.Op == fsm.ReservationReserve {
		e.ID = zeroID
	}
	return e.Validate()
}

// Reserve charges every item's units at once, all or nothing, through the
// log. Not reserved (a key had no room) is not an error. Errors: a
// *RequestError (unknown policy, a concurrency or leased policy, TTL over
// the bound, bad input), ErrClusterUpgrading, or a failure wrapping
// ErrNotCounted or ErrOutcomeUnknown (the units may then be charged until
// the TTL).
func (b *Budgets) Reserve(ctx context.Context, req ReserveRequest) (Reservation, error) {
	if len(req.Items) == 0 || len(req.Items) > MaxReservationKeys {
		return Reservation{}, badField(ErrBadRequest, "keys", "%d keys: want 1 to %d", len(req.Items), MaxReservationKeys)
	}
	for i, it := range req.Items {
		if err := validKey(at(req.Single, i), it.Policy, it.Client); err != nil {
			return Reservation{}, err
		}
		if err := validUnits(at(req.Single, i)+"units", it.Units, 1); err != nil {
			return Reservation{}, err
		}
	}
	ms, err := b.ttlMs(req.TTL)
	if err != nil {
		return Reservation{}, err
	}
	ans, err := b.route.reservation(ctx, reservationWire{Op: fsm.ReservationReserve, Owner: req.Owner, TTLMs: ms, Items: req.Items, Single: req.Single})
	if err != nil || ans.Reservation == nil {
		return Reservation{}, errOr(err)
	}
	return *ans.Reservation, nil
}

// Settle settles reservation id of owner at the actual units. Errors:
// ErrNotFound (unknown, expired, or another owner's), ErrAlreadySettled,
// or as Reserve.
func (b *Budgets) Settle(ctx context.Context, id, owner string, actual int64) (Settlement, error) {
	if err := validID("reservation", id); err != nil {
		return Settlement{}, err
	}
	if err := validUnits("units", actual, 0); err != nil {
		return Settlement{}, err
	}
	ans, err := b.route.reservation(ctx, reservationWire{Op: fsm.ReservationSettle, ID: id, Owner: owner, Units: actual})
	if err != nil || ans.Settlement == nil {
		return Settlement{}, errOr(err)
	}
	return *ans.Settlement, nil
}

func errOr(err error) error {
	if err != nil {
		return err
	}
	return outcomeUnknown(errors.New("the leader's answer was empty"))
}

// reservationLocal writes the reservation entry on the leader.
func (b *Budgets) reservationLocal(w reservationWire) (reservationAnswer, error) {
	switch {
	case w.Op == fsm.ReservationReserve:
		if err := b.requireReservable(w.Single, w.Items); err != nil {
			return reservationAnswer{}, err
		}
		if err := b.overCap(w.Owner, 0, w.Items); err != nil {
			return reservationAnswer{}, err
		}
		w.ID = b.newID()
	case w.Op.IsSettle() && b.log.RequireFormat(fsm.FormatR5) == nil:
		// Every voter applies the bounded settle: a settle never charges
		// a key past its limit (docs/budgets.md, "Overdraft").
		w.Op = fsm.ReservationSettleBounded
	}
	res, err := b.log.applyBudget(func(now int64) []byte {
		return fsm.EncodeReservation(fsm.ReservationEntry{Now: now, Op: w.Op, ID: w.ID, Owner: w.Owner, TTLMs: w.TTLMs, Items: w.Items, Units: w.Units})
	})
	if err != nil {
		return reservationAnswer{}, err
	}
	r, ok := res.(*fsm.ReservationResult)
	if !ok {
		return reservationAnswer{}, outcomeUnknown(fmt.Errorf("unexpected apply response %T", res))
	}
	if w.Op.IsSettle() {
		switch {
		case r.NotFound:
			return reservationAnswer{}, notCounted(nil, fmt.Errorf("%w: reservation %q", ErrNotFound, w.ID))
		case r.AlreadySettled:
			return reservationAnswer{}, notCounted(nil, fmt.Errorf("%w: reservation %q", ErrAlreadySettled, w.ID))
		}
		return reservationAnswer{Settlement: &Settlement{ID: w.ID, Actual: w.Units, Reserved: r.Units,
			Refunded: r.Refunded, Charged: r.Charged, Overdraft: r.Overdraft, Now: r.Now}}, nil
	}
	if r.Full {
		return reservationAnswer{}, notCounted(nil, fmt.Errorf("%w: %d reservations are outstanding or settled within their TTL, the most the cluster keeps; settle or wait", ErrConflict, fsm.MaxReservations))
	}
	if r.Item >= 0 {
		field := at(w.Single, r.Item) + "policy"
		if r.Reason == fsm.ReasonUnknownPolicy {
			return reservationAnswer{}, unknownPolicy(field, w.Items[r.Item].Policy)
		}
		return reservationAnswer{}, badField(ErrWrongPolicy, field, "%q: %s", w.Items[r.Item].Policy, r.Reason)
	}
	return reservationAnswer{Reservation: reservationOf(w, r)}, nil
}

// reservationOf is the answer to a reserve the state machine decided.
func reservationOf(w reservationWire, r *fsm.ReservationResult) *Reservation {
	out := &Reservation{Reserved: r.Reserved, Now: r.Now, ExpiresAt: r.Exp, Keys: make([]ReservedKey, len(w.Items))}
	if r.Reserved {
		out.ID = w.ID
	}
	for i, it := range w.Items {
		k := ReservedKey{Policy: it.Policy, Client: it.Client, Units: it.Units}
		if i < len(r.Hits) {
			h := r.Hits[i]
			k.Allowed = h.Outcome == window.Allowed
			if h.Main >= 0 && h.Main < len(h.Parts) {
				m := h.Parts[h.Main]
				k.Remaining, k.ResetAt, k.RetryAfterMs = m.Remaining, m.ResetAt, m.RetryAfterMs
			}
		}
		out.Keys[i] = k
	}
	return out
}

// requireReservable refuses, before the log, a reservation naming a
// policy that is unknown, counts permits, is leased or in shadow mode:
// the one place a reservation's policy kinds are checked (the state
// machine answers the same when the table changed meanwhile).
func (b *Budgets) requireReservable(single bool, items []ReserveItem) error {
	sums := make(map[[2]string]int64, len(items))
	for i, it := range items {
		field := at(single, i) + "policy"
		p, ok := b.table.Policy(it.Policy)
		switch {
		case !ok:
			return unknownPolicy(field, it.Policy)
		case p.IsConcurrency():
			return badField(ErrWrongPolicy, field, "%q is a concurrency policy: it counts permits (POST /v1/permits), not units", it.Policy)
		case p.IsLeased():
			return badField(ErrWrongPolicy, field, "%q is leased: reservations need a strict policy", it.Policy)
		case p.IsShadow():
			return badField(ErrWrongPolicy, field, "%q: %s", it.Policy, fsm.ReasonShadow)
		}
		// Items of one key count together: a sum above a limit's
		// capacity can never be reserved, however long the caller waits.
		k := [2]string{it.Policy, it.Client}
		sums[k] = min(sums[k]+it.Units, policy.MaxLimit+1)
		if l, never := p.NeverAllows(sums[k]); never {
			return badField(ErrNeverFits, at(single, i)+"units", "%d units of %q for client %q: a limit of %d can never allow them; do not retry",
				sums[k], it.Policy, it.Client, p.Limits[l].Capacity())
		}
	}
	return nil
}

var opReservation = leaderOp[reservationWire, reservationAnswer]{name: "reservation",
	check:  reservationWire.check,
	format: needs[reservationWire](fsm.FormatR4),
	run: func(n *Node, _ context.Context, w reservationWire) (reservationAnswer, error) {
		return n.budgets.reservationLocal(w)
	}}
