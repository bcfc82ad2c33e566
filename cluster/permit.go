package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/rlnode/rlnode/fsm"
)

// PermitRequest asks for one permit of (Policy, Client), bound to Owner
// (the caller's credential identity), for TTL (0: DefaultPermitTTL, at
// most the node's bound).
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

// AcquirePermit takes a permit of a concurrency policy's key through the
// log, if fewer than the limit are live. A refused acquire is not an
// error (Acquired false, RetryAt set). Errors: a *RequestError (unknown
// policy, wrong kind, TTL over the bound, bad input), ErrClusterUpgrading,
// ErrTooManyPermits, or a failure wrapping ErrNotCounted or
// ErrOutcomeUnknown (a permit may then be live, unknown to the caller,
// until its TTL).
func (b *Budgets) AcquirePermit(ctx context.Context, req PermitRequest) (Permit, error) {
	if err := validKey("", req.Policy, req.Client); err != nil {
		return Permit{}, err
	}
	ms, err := b.ttlMs(req.TTL)
	if err != nil {
		return Permit{}, err
	}
	return b.route.permit(ctx, permitWire{Op: fsm.PermitAcquire, Owner: req.Owner, Policy: req.Policy, Client: req.Client, TTLMs: ms})
}

// ReleasePermit ends the permit id of owner. Errors: ErrNotFound (no such
// live permit of owner), or as AcquirePermit.
func (b *Budgets) ReleasePermit(ctx context.Context, id, owner string) (Permit, error) {
	if err := validID("permit", id); err != nil {
		return Permit{}, err
	}
	return b.route.permit(ctx, permitWire{Op: fsm.PermitRelease, ID: id, Owner: owner})
}

// RenewPermit moves the permit's end to now + ttl (never earlier).
func (b *Budgets) RenewPermit(ctx context.Context, id, owner string, ttl time.Duration) (Permit, error) {
	if err := validID("permit", id); err != nil {
		return Permit{}, err
	}
	ms, err := b.ttlMs(ttl)
	if err != nil {
		return Permit{}, err
	}
	return b.route.permit(ctx, permitWire{Op: fsm.PermitRenew, ID: id, Owner: owner, TTLMs: ms})
}

// ReleaseOldestPermit ends the key's oldest live permit, whoever holds it
// (Envoy's is_negative_hits names no permit). ErrNotFound when none is live.
func (b *Budgets) ReleaseOldestPermit(ctx context.Context, policyName, client string) (Permit, error) {
	if err := validKey("", policyName, client); err != nil {
		return Permit{}, err
	}
	return b.route.permit(ctx, permitWire{Op: fsm.PermitReleaseOldest, Policy: policyName, Client: client})
}

// validID refuses a malformed id as naming nothing (404, not 400: ids
// are the cluster's, and a caller holding a bad one holds nothing).
func validID(what, id string) error {
	if err := fsm.ValidateID(id); err != nil {
		return notCounted(nil, fmt.Errorf("%w: %s %q: %w", ErrNotFound, what, id, err))
	}
	return nil
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

// check guards the internal endpoint: w as the entry would be (with a
// stand-in id and time where the leader supplies them).
func (w permitWire) check() error {
	e := fsm.PermitEntry{Now: 1, Op: w.Op, ID: w.ID, Owner: w.Owner, Policy: w.Policy, Client: w.Client, TTLMs: w.TTLMs}
	if w.Op == fsm.PermitAcquire {
		e.ID = zeroID
	}
	return e.Validate()
}

// permitLocal writes the permit entry on the leader.
func (b *Budgets) permitLocal(w permitWire) (Permit, error) {
	if w.Op == fsm.PermitAcquire || w.Op == fsm.PermitReleaseOldest {
		if err := b.requireConcurrency(w.Policy); err != nil {
			return Permit{}, err
		}
	}
	if w.Op == fsm.PermitAcquire {
		if err := b.overCap(w.Owner, 1, nil); err != nil {
			return Permit{}, err
		}
		w.ID = b.newID()
	}
	res, err := b.log.applyBudget(func(now int64) []byte {
		return fsm.EncodePermit(fsm.PermitEntry{Now: now, Op: w.Op, ID: w.ID, Owner: w.Owner, Policy: w.Policy, Client: w.Client, TTLMs: w.TTLMs})
	})
	if err != nil {
		return Permit{}, err
	}
	r, ok := res.(*fsm.PermitResult)
	if !ok {
		return Permit{}, outcomeUnknown(fmt.Errorf("unexpected apply response %T", res))
	}
	p := Permit{Policy: r.Policy, Client: r.Client, Now: r.Now, Live: r.Live, Limit: r.Limit, ExpiresAt: r.Exp}
	switch {
	case r.UnknownPolicy:
		return p, unknownPolicy("policy", w.Policy)
	case r.NotConcurrency:
		return p, badField(ErrWrongPolicy, "policy", "%q is not a concurrency policy; permits need one", w.Policy)
	case r.NotFound:
		return p, notCounted(nil, fmt.Errorf("%w: permit %q", ErrNotFound, w.ID))
	case r.Full:
		return p, notCounted(nil, fmt.Errorf("%w: %d permits are live across all keys, the most the cluster keeps; release some or wait for their TTLs", ErrTooManyPermits, fsm.MaxPermits))
	case w.Op == fsm.PermitAcquire && !r.Acquired:
		p.RetryAt = r.RetryAt
		return p, nil
	}
	p.ID, p.Acquired = r.ID, w.Op == fsm.PermitAcquire
	return p, nil
}

// requireConcurrency refuses, before the log, a permit of a policy that
// is unknown or counts hits: the one place a permit's policy kind is
// checked (the state machine answers the same when the table changed
// meanwhile).
func (b *Budgets) requireConcurrency(name string) error {
	p, ok := b.table.Policy(name)
	switch {
	case !ok:
		return unknownPolicy("policy", name)
	case !p.IsConcurrency():
		return badField(ErrWrongPolicy, "policy", "%q is a %s policy; permits need a concurrency policy ({\"algorithm\":\"concurrency\",\"limits\":[{\"limit\":N}]})", name, p.Algorithm)
	}
	return nil
}

func unknownPolicy(field, name string) *RequestError {
	return badField(ErrUnknownPolicy, field, "%q is not defined (GET /v1/policies lists them)", name)
}

var opPermit = leaderOp[permitWire, Permit]{name: "permit",
	check:  permitWire.check,
	format: needs[permitWire](fsm.FormatR4),
	run: func(n *Node, _ context.Context, w permitWire) (Permit, error) {
		return n.budgets.permitLocal(w)
	}}

// LivePermits lists the permits live in this node's state (as of the last
// entry it applied), by key then age: for status pages and tests.
func (b *Budgets) LivePermits() []fsm.PermitView { return b.counts.LivePermits() }

// LivePermitsByPolicy counts the permits in this node's state per
// concurrency policy, 0 for a concurrency policy with none (metrics, the
// operator's views): counts the state machine keeps on apply, so a
// scrape is O(policies) under its lock, never a scan of the permits
// (issue 35: at 1M permits a scrape stalled /check for 2.2 s). A permit
// past its TTL counts until the sweep drops it.
func (b *Budgets) LivePermitsByPolicy() map[string]int64 { return b.counts.PermitsByPolicy() }
