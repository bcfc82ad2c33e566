package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/window"
)

// ReserveItem charges Units to (Policy, Client).
type ReserveItem = fsm.ReserveItem

// MaxReservationKeys bounds the keys of one reservation.
const MaxReservationKeys = fsm.MaxReservationItems

// ReserveRequest charges every item at once, all or nothing, for TTL (0:
// DefaultPermitTTL, at most MaxPermitTTL), bound to Owner.
type ReserveRequest struct {
	Owner string        `json:"owner"`
	TTL   time.Duration `json:"ttl"`
	Items []ReserveItem `json:"items"`
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
}

// reservationAnswer is the answer of the leader operation: one of the two.
type reservationAnswer struct {
	Reservation *Reservation `json:"reservation,omitempty"`
	Settlement  *Settlement  `json:"settlement,omitempty"`
}

func (w reservationWire) check() error {
	e := fsm.ReservationEntry{Now: 1, Op: w.Op, ID: w.ID, Owner: w.Owner, TTLMs: w.TTLMs, Items: w.Items, Units: w.Units}
	if w.Op == fsm.ReservationReserve {
		e.ID = zeroID
	} else if err := fsm.ValidateID(w.ID); err != nil {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return e.Validate()
}

// Reserve charges every item's units at once, all or nothing, through the
// log. Not reserved (a key had no room) is not an error. Errors:
// ErrUnknownPolicy, ErrWrongPolicy (a concurrency or leased policy), bad
// input, ErrClusterUpgrading, or a failure wrapping ErrNotCounted or
// ErrOutcomeUnknown (the units may then be charged until the TTL).
func (n *Node) Reserve(ctx context.Context, req ReserveRequest) (Reservation, error) {
	ms, err := n.ttlFor(req.TTL)
	if err != nil {
		return Reservation{}, err
	}
	ans, err := n.reservationOp(ctx, reservationWire{Op: fsm.ReservationReserve, Owner: req.Owner, TTLMs: ms, Items: req.Items})
	if err != nil || ans.Reservation == nil {
		return Reservation{}, errOr(err)
	}
	return *ans.Reservation, nil
}

// Settle settles reservation id of owner at the actual units. Errors:
// ErrNotFound (unknown, expired, or another owner's), ErrAlreadySettled,
// or as Reserve.
func (n *Node) Settle(ctx context.Context, id, owner string, actual int64) (Settlement, error) {
	ans, err := n.reservationOp(ctx, reservationWire{Op: fsm.ReservationSettle, ID: id, Owner: owner, Units: actual})
	if err != nil || ans.Settlement == nil {
		return Settlement{}, errOr(err)
	}
	return *ans.Settlement, nil
}

func errOr(err error) error {
	if err != nil {
		return err
	}
	return errors.Join(ErrOutcomeUnknown, errors.New("the leader's answer was empty"))
}

func (n *Node) reservationOp(ctx context.Context, w reservationWire) (reservationAnswer, error) {
	if err := w.check(); err != nil {
		if errors.Is(err, ErrNotFound) {
			return reservationAnswer{}, err
		}
		return reservationAnswer{}, errors.Join(ErrNotCounted, ErrBadRequest, err)
	}
	if err := n.requireLeaderFormat(fsm.FormatR4); err != nil { // as permitOp
		return reservationAnswer{}, errors.Join(ErrNotCounted, err)
	}
	var out reservationAnswer
	err := n.permitCall(ctx, func(ctx context.Context) error {
		var err error
		out, err = opReservation.do(ctx, n, w)
		return err
	})
	return out, err
}

// reservationLocal writes the reservation entry on the leader.
func (n *Node) reservationLocal(_ context.Context, w reservationWire) (reservationAnswer, error) {
	if err := n.RequireFormat(fsm.FormatR4); err != nil {
		return reservationAnswer{}, errors.Join(ErrNotCounted, err)
	}
	if w.Op == fsm.ReservationReserve {
		if err := n.requireReservable(w.Items); err != nil {
			return reservationAnswer{}, err
		}
		w.ID = newID()
	}
	res, err := n.applyLease(false, func(now int64) []byte {
		return fsm.EncodeReservation(fsm.ReservationEntry{Now: now, Op: w.Op, ID: w.ID, Owner: w.Owner, TTLMs: w.TTLMs, Items: w.Items, Units: w.Units})
	})
	if err != nil {
		return reservationAnswer{}, err
	}
	r, ok := res.(*fsm.ReservationResult)
	if !ok {
		return reservationAnswer{}, errors.Join(ErrOutcomeUnknown, fmt.Errorf("unexpected apply response %T", res))
	}
	if w.Op == fsm.ReservationSettle {
		switch {
		case r.NotFound:
			return reservationAnswer{}, fmt.Errorf("%w: reservation %q", ErrNotFound, w.ID)
		case r.AlreadySettled:
			return reservationAnswer{}, fmt.Errorf("%w: reservation %q", ErrAlreadySettled, w.ID)
		}
		return reservationAnswer{Settlement: &Settlement{ID: w.ID, Actual: w.Units, Reserved: r.Units,
			Refunded: r.Refunded, Charged: r.Charged, Overdraft: r.Overdraft, Now: r.Now}}, nil
	}
	if r.Full {
		return reservationAnswer{}, fmt.Errorf("%w: %d reservations are outstanding or settled within their TTL, the most the cluster keeps; settle or wait", ErrConflict, fsm.MaxReservations)
	}
	if r.Item >= 0 {
		it := w.Items[r.Item]
		if r.Reason == fsm.ReasonUnknownPolicy {
			return reservationAnswer{}, fmt.Errorf("keys[%d]: %w %q", r.Item, ErrUnknownPolicy, it.Policy)
		}
		return reservationAnswer{}, fmt.Errorf("keys[%d].policy: %w: %s", r.Item, ErrWrongPolicy, r.Reason)
	}
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
	return reservationAnswer{Reservation: out}, nil
}

// requireReservable refuses, before the log, a reservation naming a
// policy that is unknown, counts permits, is leased or in shadow mode.
func (n *Node) requireReservable(items []ReserveItem) error {
	for i, it := range items {
		p, ok := n.fsm.Policy(it.Policy)
		switch {
		case !ok:
			return errors.Join(ErrNotCounted, fmt.Errorf("keys[%d].policy: %w %q", i, ErrUnknownPolicy, it.Policy))
		case p.IsConcurrency():
			return errors.Join(ErrNotCounted, fmt.Errorf("keys[%d].policy: %w: %q %s", i, ErrWrongPolicy, it.Policy, fsm.ReasonConcurrency))
		case p.IsLeased():
			return errors.Join(ErrNotCounted, fmt.Errorf("keys[%d].policy: %w: %q: %s", i, ErrWrongPolicy, it.Policy, fsm.ReasonLeased))
		case p.IsShadow():
			return errors.Join(ErrNotCounted, fmt.Errorf("keys[%d].policy: %w: %q: %s", i, ErrWrongPolicy, it.Policy, fsm.ReasonShadow))
		}
	}
	return nil
}

var opReservation = leaderOp[reservationWire, reservationAnswer]{name: "reservation",
	check: reservationWire.check,
	run:   (*Node).reservationLocal}
