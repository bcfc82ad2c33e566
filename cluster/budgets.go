package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/policy"
)

// Budgets are the permits and reservations callers take through the log
// (cluster/DESIGN.md, "Permits and reservations"): a type of its own over
// a narrow interface, as the lease holder is, so it is tested without a
// cluster (budgets_test.go). A request is validated once, here, on the
// node asked; it then goes to the leader by the one leader-operation rule
// (one call into the node, retried there only while nothing was written);
// the leader checks the policy's kind and the caller's share and writes
// the entry.
type Budgets struct {
	route budgetRoute
	log   budgetLog
	table budgetTable
	// maxTTL is this node's --max-permit-ttl.
	maxTTL time.Duration
	// caps bound each credential (credentialcaps.go); counts are what
	// they are checked against (nil: no caps).
	caps   CredentialCaps
	counts budgetCounts
	// newID draws ids on the leader (crypto/rand).
	newID func() string
}

// budgetRoute runs a budget operation on the leader, here or forwarded,
// by the one retry rule (leaderOp.retrying) within the apply timeout.
type budgetRoute interface {
	permit(ctx context.Context, w permitWire) (Permit, error)
	reservation(ctx context.Context, w reservationWire) (reservationAnswer, error)
}

// budgetLog writes one entry on the leader, stamped by the leader clock;
// the answer is the state machine's.
type budgetLog interface {
	applyBudget(encode func(now int64) []byte) (any, error)
	// leaderNow is the time the next entry would be stamped with.
	leaderNow() int64
	// RequireFormat is the version gate (gate.go): nil when every voter
	// applies entries of format need.
	RequireFormat(need fsm.Format) error
}

// budgetTable is the replicated policy table as the budgets read it on
// the leader.
type budgetTable interface {
	Policy(name string) (policy.Policy, bool)
}

func newBudgets(route budgetRoute, log budgetLog, table budgetTable, maxTTL time.Duration, caps CredentialCaps, counts budgetCounts) *Budgets {
	return &Budgets{route: route, log: log, table: table, maxTTL: maxTTL, caps: caps.withDefaults(), counts: counts, newID: newID}
}

// leaderNow is the leader clock's estimate of cluster time (its wall
// clock before it has one): only when lapsed budgets are due a sweep.
func (n *Node) leaderNow() int64 {
	if now, ok := n.clock.clusterNowMs(); ok {
		return now
	}
	return n.clock.wallNowMs()
}

// applyBudget writes a permit or reservation entry (never a grant).
func (n *Node) applyBudget(encode func(now int64) []byte) (any, error) {
	return n.applyLease(false, encode)
}

// stateCounts are the node's budget counts: its state machine's (which
// Open makes after the budgets).
type stateCounts struct{ n *Node }

func (c stateCounts) PermitsOfOwner(owner string) int64 { return c.n.fsm.PermitsOfOwner(owner) }
func (c stateCounts) ReservedBytesOfOwner(owner string) int64 {
	return c.n.fsm.ReservedBytesOfOwner(owner)
}
func (c stateCounts) ReservedBytes() int64      { return c.n.fsm.ReservedBytes() }
func (c stateCounts) BudgetsDue(now int64) bool { return c.n.fsm.BudgetsDue(now) }
func (c stateCounts) LivePermits() []fsm.PermitView {
	return c.n.fsm.LivePermits()
}
func (c stateCounts) PermitsByPolicy() map[string]int64 { return c.n.fsm.PermitsByPolicy() }

// Budgets is this node's permits and reservations, the value the front
// ends take.
func (n *Node) Budgets() *Budgets { return n.budgets }

// nodeRoute is the node's route for the features' leader operations
// (budgets, leases, calls): the leader-operation rule, within the apply
// timeout.
type nodeRoute struct{ n *Node }

func (r nodeRoute) permit(ctx context.Context, w permitWire) (Permit, error) {
	return opPermit.retrying(ctx, r.n, w, r.n.cfg.ApplyTimeout)
}

func (r nodeRoute) reservation(ctx context.Context, w reservationWire) (reservationAnswer, error) {
	return opReservation.retrying(ctx, r.n, w, r.n.cfg.ApplyTimeout)
}

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
	// ErrTTLOverBound: the TTL asked is over this node's --max-permit-ttl
	// (also ErrBadRequest).
	ErrTTLOverBound = errors.New("the TTL is over this node's bound")
	// ErrNeverFits: a reservation that no wait can make: a key's units
	// (its items summed) above a limit's capacity (422, never retried).
	ErrNeverFits = errors.New("more than the policy could ever allow")
	// ErrTooManyPermits: the state machine holds fsm.MaxPermits permits
	// (across every key); the acquire took nothing. A bound of the
	// caller's use, not a cluster condition: no other node answers
	// differently.
	ErrTooManyPermits = errors.New("the cluster holds the most permits it keeps")
)

// RequestError is a permit or reservation request refused for what it
// asks, before anything was written: Kind is ErrUnknownPolicy,
// ErrWrongPolicy, ErrTTLOverBound or ErrBadRequest; Field names the part
// of the request ("policy", "keys[1].units", "ttl"). errors.Is matches
// ErrNotCounted, Kind, and ErrBadRequest for every kind but
// ErrUnknownPolicy.
type RequestError struct {
	Kind   error
	Field  string
	Detail string
}

func (e *RequestError) Error() string { return e.Field + ": " + e.Detail }

func (e *RequestError) Unwrap() []error {
	errs := []error{ErrNotCounted, e.Kind}
	if e.Kind == ErrTTLOverBound {
		errs = append(errs, ErrBadRequest)
	}
	return errs
}

func badField(kind error, field, format string, args ...any) *RequestError {
	return &RequestError{Kind: kind, Field: field, Detail: fmt.Sprintf(format, args...)}
}

// Permit and reservation TTLs.
const (
	DefaultPermitTTL = 30 * time.Second
	MaxPermitTTL     = fsm.MaxPermitTTLMs * time.Millisecond
)

// MaxPermitTTL is the longest TTL this node accepts for a permit or a
// reservation (Config.MaxPermitTTL, rlnode serve --max-permit-ttl).
func (b *Budgets) MaxPermitTTL() time.Duration { return b.maxTTL }

// ttlMs is the TTL to write for ttl asked (0: DefaultPermitTTL, capped by
// the node's bound), or a RequestError naming "ttl". The one place the
// bound is checked.
func (b *Budgets) ttlMs(ttl time.Duration) (int64, error) {
	if ttl < 0 || ttl > b.maxTTL || (ttl > 0 && ttl < time.Millisecond) {
		return 0, badField(ErrTTLOverBound, "ttl", "%s: want 1ms to %s (this node's --max-permit-ttl; leave it out for %s)",
			ttl, b.maxTTL, min(DefaultPermitTTL, b.maxTTL))
	}
	if ttl == 0 {
		ttl = min(DefaultPermitTTL, b.maxTTL)
	}
	return ttl.Milliseconds(), nil
}

// validKey checks a (policy, client) pair once, naming the field with
// prefix at ("" or "keys[2].").
func validKey(at, policyName, client string) error {
	if err := policy.ValidateName(policyName); err != nil {
		return badField(ErrBadRequest, at+"policy", "%v", err)
	}
	if err := ValidateClient(client); err != nil {
		return badField(ErrBadRequest, at+"client", "%v", err)
	}
	return nil
}

// validUnits is the one spelling of the units range of a reservation and
// a settle (min 1 for a reserve, 0 for a settle).
func validUnits(field string, units, least int64) error {
	if units < least || units > policy.MaxLimit {
		return badField(ErrBadRequest, field, "%d: want %d to %d", units, least, int64(policy.MaxLimit))
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

var zeroID = fmt.Sprintf("%032x", 0)
