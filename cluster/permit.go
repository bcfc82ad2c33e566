package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/rlnode/rlnode/fsm"
)

// Errors of permits and reservations (cluster/DESIGN.md, "Permits and
// reservations").
var (
	// ErrNotFound: the id names no live permit or reservation of the
	// caller (never made, released, expired, or another credential's).
	ErrNotFound = errors.New("no such permit or reservation")
	// ErrAlreadySettled: the reservation was settled before.
	ErrAlreadySettled = errors.New("the reservation is already settled")
	// ErrWrongPolicy: a permit of a policy that counts hits, or a
	// reservation of a concurrency or leased policy.
	ErrWrongPolicy = errors.New("the policy does not take this kind of request")
	// ErrBadRequest marks a permit or reservation request refused for its
	// input before the log (a TTL over the bound, a malformed key): the
	// message names the field.
	ErrBadRequest = errors.New("bad request")
	// ErrTooManyPermits: the state machine holds fsm.MaxPermits permits
	// (across every key); the acquire took nothing. A bound of the
	// caller's use, not a cluster condition: no other node answers
	// differently.
	ErrTooManyPermits = errors.New("the cluster holds the most permits it keeps")
)

// Permit and reservation TTLs.
const (
	DefaultPermitTTL = 30 * time.Second
	MaxPermitTTL     = fsm.MaxPermitTTLMs * time.Millisecond
)

// PermitRequest asks for one permit of (Policy, Client), bound to Owner
// (the caller's credential identity, "" without one), for TTL (0:
// DefaultPermitTTL, at most MaxPermitTTL).
type PermitRequest struct {
	Policy string        `json:"policy"`
	Client string        `json:"client"`
	Owner  string        `json:"owner"`
	TTL    time.Duration `json:"ttl"`
}

// Permit is the cluster's answer about one permit.
type Permit struct {
	// ID names the permit (acquired, renewed or released); empty when an
	// acquire was refused.
	ID     string `json:"permit,omitempty"`
	Policy string `json:"policy,omitempty"`
	Client string `json:"client,omitempty"`
	// Acquired: an acquire got the permit. A refused one has RetryAt,
	// when the key's earliest live permit expires (Unix ms).
	Acquired bool `json:"acquired"`
	// Now is the entry's time, ExpiresAt the permit's end (Unix ms,
	// cluster time).
	Now       int64 `json:"now"`
	ExpiresAt int64 `json:"expiresAt,omitempty"`
	RetryAt   int64 `json:"retryAt,omitempty"`
	// Live permits of the key after the entry, and the policy's limit.
	Live  int64 `json:"live"`
	Limit int64 `json:"limit"`
}

// ValidatePermitTTL checks a TTL a caller asked for (0: the default)
// against the state machine's bound.
func ValidatePermitTTL(ttl time.Duration) error { return validateTTL(ttl, MaxPermitTTL) }

// MaxPermitTTL is the longest TTL this node accepts for a permit or a
// reservation (Config.MaxPermitTTL, rlnode serve --max-permit-ttl).
func (n *Node) MaxPermitTTL() time.Duration { return n.cfg.MaxPermitTTL }

func validateTTL(ttl, bound time.Duration) error {
	if ttl < 0 || ttl > bound || (ttl > 0 && ttl < time.Millisecond) {
		return fmt.Errorf("ttl %s out of range (1ms to %s, this node's --max-permit-ttl)", ttl, bound)
	}
	return nil
}

// ttlFor is the TTL to write for ttl asked (0: DefaultPermitTTL, capped by
// the node's bound), or an error naming ttl.
func (n *Node) ttlFor(ttl time.Duration) (int64, error) {
	if err := validateTTL(ttl, n.cfg.MaxPermitTTL); err != nil {
		return 0, errors.Join(ErrNotCounted, ErrBadRequest, err)
	}
	if ttl == 0 {
		ttl = min(DefaultPermitTTL, n.cfg.MaxPermitTTL)
	}
	return ttl.Milliseconds(), nil
}

// AcquirePermit takes a permit of a concurrency policy's key through the
// log, if fewer than the limit are live. A refused acquire is not an
// error (Acquired false, RetryAt set). Errors: ErrUnknownPolicy,
// ErrWrongPolicy, bad input, ErrClusterUpgrading, or a failure wrapping
// ErrNotCounted or ErrOutcomeUnknown (a permit may then be live, unknown
// to the caller, until its TTL).
func (n *Node) AcquirePermit(ctx context.Context, req PermitRequest) (Permit, error) {
	ms, err := n.ttlFor(req.TTL)
	if err != nil {
		return Permit{}, err
	}
	return n.permitOp(ctx, permitWire{Op: fsm.PermitAcquire, Owner: req.Owner, Policy: req.Policy, Client: req.Client, TTLMs: ms})
}

// ReleasePermit ends the permit id of owner. Errors: ErrNotFound (no such
// live permit of owner), or as AcquirePermit.
func (n *Node) ReleasePermit(ctx context.Context, id, owner string) (Permit, error) {
	return n.permitOp(ctx, permitWire{Op: fsm.PermitRelease, ID: id, Owner: owner})
}

// RenewPermit moves the permit's end to now + ttl (never earlier).
func (n *Node) RenewPermit(ctx context.Context, id, owner string, ttl time.Duration) (Permit, error) {
	ms, err := n.ttlFor(ttl)
	if err != nil {
		return Permit{}, err
	}
	return n.permitOp(ctx, permitWire{Op: fsm.PermitRenew, ID: id, Owner: owner, TTLMs: ms})
}

// ReleaseOldestPermit ends the key's oldest live permit, whoever holds it
// (Envoy's is_negative_hits names no permit). ErrNotFound when none is live.
func (n *Node) ReleaseOldestPermit(ctx context.Context, policyName, client string) (Permit, error) {
	return n.permitOp(ctx, permitWire{Op: fsm.PermitReleaseOldest, Policy: policyName, Client: client})
}

// permitWire is the body of the leader operation "permit"; answers are a
// Permit.
type permitWire struct {
	Op     fsm.PermitOp `json:"op"`
	ID     string       `json:"id,omitempty"`
	Owner  string       `json:"owner,omitempty"`
	Policy string       `json:"policy,omitempty"`
	Client string       `json:"client,omitempty"`
	TTLMs  int64        `json:"ttlMs,omitempty"`
}

// check validates w as the entry would be (with a stand-in id and time
// where the leader supplies them).
func (w permitWire) check() error {
	e := fsm.PermitEntry{Now: 1, Op: w.Op, ID: w.ID, Owner: w.Owner, Policy: w.Policy, Client: w.Client, TTLMs: w.TTLMs}
	if w.Op == fsm.PermitAcquire {
		e.ID = zeroID
	}
	if err := e.Validate(); err != nil {
		if w.Op == fsm.PermitRelease || w.Op == fsm.PermitRenew {
			if fsm.ValidateID(w.ID) != nil {
				return fmt.Errorf("%w: %w", ErrNotFound, err) // a malformed id names nothing
			}
		}
		return err
	}
	return nil
}

var zeroID = fmt.Sprintf("%032x", 0)

func (n *Node) permitOp(ctx context.Context, w permitWire) (Permit, error) {
	if err := w.check(); err != nil {
		if errors.Is(err, ErrNotFound) {
			return Permit{}, err
		}
		return Permit{}, errors.Join(ErrNotCounted, ErrBadRequest, err)
	}
	// The node asked checks the leader's format: a leader of an older
	// release has no gate and no permit operation.
	if err := n.requireLeaderFormat(fsm.FormatR4); err != nil {
		return Permit{}, errors.Join(ErrNotCounted, err)
	}
	var out Permit
	err := n.permitCall(ctx, func(ctx context.Context) error {
		var err error
		out, err = opPermit.do(ctx, n, w)
		return err
	})
	return out, err
}

// permitCall is leaseCall for permits and reservations: a write that never
// reached the log is asked again of the next leader until ApplyTimeout,
// but an answer about the request itself (unknown policy or id, wrong
// policy, an upgrading cluster, bad input) is final.
func (n *Node) permitCall(ctx context.Context, call func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()
	for {
		err := leaseError(call(ctx))
		if err == nil || !errors.Is(err, ErrNotCounted) || isFinal(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-n.stop:
			return errors.Join(ErrNotCounted, ErrClosed)
		case <-time.After(leaseRetryInterval):
		}
	}
}

func isFinal(err error) bool {
	for _, final := range []error{ErrUnknownPolicy, ErrWrongPolicy, ErrNotFound, ErrAlreadySettled, ErrClusterUpgrading, errMalformed, ErrForbidden, ErrBadRequest, ErrConflict, ErrTooManyPermits} {
		if errors.Is(err, final) {
			return true
		}
	}
	return false
}

// permitLocal writes the permit entry on the leader.
func (n *Node) permitLocal(_ context.Context, w permitWire) (Permit, error) {
	if err := n.RequireFormat(fsm.FormatR4); err != nil {
		return Permit{}, errors.Join(ErrNotCounted, err)
	}
	if w.Op == fsm.PermitAcquire || w.Op == fsm.PermitReleaseOldest {
		if err := n.requireConcurrency(w.Policy); err != nil {
			return Permit{}, err
		}
	}
	if w.Op == fsm.PermitAcquire {
		w.ID = newID()
	}
	res, err := n.applyLease(false, func(now int64) []byte {
		return fsm.EncodePermit(fsm.PermitEntry{Now: now, Op: w.Op, ID: w.ID, Owner: w.Owner, Policy: w.Policy, Client: w.Client, TTLMs: w.TTLMs})
	})
	if err != nil {
		return Permit{}, err
	}
	r, ok := res.(*fsm.PermitResult)
	if !ok {
		return Permit{}, errors.Join(ErrOutcomeUnknown, fmt.Errorf("unexpected apply response %T", res))
	}
	p := Permit{Policy: r.Policy, Client: r.Client, Now: r.Now, Live: r.Live, Limit: r.Limit, ExpiresAt: r.Exp}
	switch {
	case r.UnknownPolicy:
		return p, fmt.Errorf("%w %q", ErrUnknownPolicy, w.Policy)
	case r.NotConcurrency:
		return p, fmt.Errorf("%w: %q is not a concurrency policy", ErrWrongPolicy, w.Policy)
	case r.NotFound:
		return p, fmt.Errorf("%w: permit %q", ErrNotFound, w.ID)
	case r.Full:
		return p, errors.Join(ErrNotCounted, fmt.Errorf("%w: %d permits are live across all keys, the most the cluster keeps; release some or wait for their TTLs", ErrTooManyPermits, fsm.MaxPermits))
	case w.Op == fsm.PermitAcquire && !r.Acquired:
		p.RetryAt = r.RetryAt
		return p, nil
	}
	p.ID, p.Acquired = r.ID, w.Op == fsm.PermitAcquire
	return p, nil
}

// requireConcurrency refuses, before the log, a permit of a policy that
// is unknown or counts hits.
func (n *Node) requireConcurrency(name string) error {
	p, ok := n.fsm.Policy(name)
	switch {
	case !ok:
		return errors.Join(ErrNotCounted, fmt.Errorf("%w %q", ErrUnknownPolicy, name))
	case !p.IsConcurrency():
		return errors.Join(ErrNotCounted, fmt.Errorf("%w: policy %q is %s, permits need a concurrency policy", ErrWrongPolicy, name, p.Algorithm))
	}
	return nil
}

// newID draws a permit or reservation id on the leader: 16 bytes of
// crypto/rand in hex, carried in the entry so every replica stores it.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails on Linux (Go 1.24: it cannot)
	return hex.EncodeToString(b[:])
}

var opPermit = leaderOp[permitWire, Permit]{name: "permit",
	check: permitWire.check,
	run:   (*Node).permitLocal}

// mountPermitOps serves the permit and reservation operations for other
// nodes.
func (n *Node) mountPermitOps(mux *http.ServeMux) {
	mux.HandleFunc("POST "+opPermit.path(), opPermit.handler(n))
	mux.HandleFunc("POST "+opReservation.path(), opReservation.handler(n))
}

// LivePermits lists the permits live in this node's state (as of the last
// entry it applied), by key then age: for status pages and tests.
func (n *Node) LivePermits() []fsm.PermitView { return n.fsm.LivePermits() }

// LivePermitsByPolicy counts the permits live in this node's state per
// concurrency policy, 0 for a concurrency policy with none (metrics and
// the operator's views; policies are an admin-defined, bounded set).
func (n *Node) LivePermitsByPolicy() map[string]int64 {
	out := map[string]int64{}
	for _, p := range n.fsm.Policies() {
		if p.IsConcurrency() {
			out[p.Name] = 0
		}
	}
	for _, pm := range n.fsm.LivePermits() {
		if _, ok := out[pm.Policy]; ok {
			out[pm.Policy]++
		}
	}
	return out
}
