package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/lease"
	"github.com/rlnode/rlnode/window"
)

// Lease timing: the bounds and the holder's margin are the lease core's
// (lease.DefaultLease, lease.MaxLease, lease.UsableFor), read there by
// every holder; see cluster/DESIGN.md, "Leases".
const (
	maxGrantItems = fsm.MaxGrantItems
)

// MaxGrantItems bounds the keys of one Grants call (one log entry).
const MaxGrantItems = fsm.MaxGrantItems

// ErrNotLeased is returned for a grant of a strict policy: only leased
// policies lend budget.
var ErrNotLeased = errors.New("the policy is not leased")

// GrantItem asks for up to Want units of (Policy, Client).
type GrantItem = fsm.GrantItem

// GrantRequest asks the cluster to lend Holder up to Want units of
// (Policy, Client) for Lease (0: lease.DefaultLease, at most lease.MaxLease).
type GrantRequest struct {
	Policy string `json:"policy"`
	Client string `json:"client"`
	// Holder names who spends the units: a node's id, or an external
	// holder's (an application, an Envoy). Only the holder may return them.
	Holder string        `json:"holder"`
	Want   int64         `json:"want"`
	Lease  time.Duration `json:"lease"`
}

// Grant is what the cluster lent. Units belong to one window (fixed and
// sliding windows: the window WindowStart..ResetAt of the most
// constraining limit; every limit's window is in Parts) or were taken from
// the bucket (token bucket), and may be spent only before Deadline(sent),
// where sent is when the holder sent the request, on its own monotonic
// clock. A Grant with Units 0 lends nothing: the budget has no room now
// (Parts say when it will).
type Grant struct {
	Policy string `json:"policy"`
	Client string `json:"client"`
	Holder string `json:"holder"`
	// Algorithm is the policy's: a token bucket's grant is best released
	// (a Return of 0 units) as soon as it is spent, since the bucket stays
	// capped by what holders hold until then.
	Algorithm string `json:"algorithm"`
	Units     int64  `json:"units"`
	// ID names the grant in a Return (the log index of its entry).
	ID uint64 `json:"id"`
	// Now and Expiry are the grant entry's time and the grant's end, in
	// the cluster's (leader) Unix ms; Valid is Expiry - Now, the duration
	// a holder measures from when it sent the request.
	Now    int64         `json:"now"`
	Expiry int64         `json:"expiry"`
	Valid  time.Duration `json:"valid"`
	// UsableFor is how long after sending its request the holder may spend
	// the units: Valid less the margin for clock rate error, and less the
	// leader's --max-clock-offset where the grant ends with a token
	// bucket's cap, or with its window while some voter runs an earlier
	// release (lease.UsableFor: such a leader moves cluster time to its
	// clock at a failover). 0 or less: not usable at all (give the units
	// back).
	UsableFor time.Duration `json:"usableFor"`
	// WindowStart and ResetAt describe the most constraining limit after
	// the grant (ResetAt: when its window ends; a token bucket: when it is
	// full again); Remaining is what is left there for everyone else.
	WindowStart int64           `json:"windowStart"`
	ResetAt     int64           `json:"resetAt"`
	Remaining   int64           `json:"remaining"`
	Parts       []window.Result `json:"parts"`
	// NoSlice: the policy is this region's mirror of a global budget and
	// the region holds no live slice of the key (fsm.GrantResult.NoSlice):
	// nothing lent; Grant fails with ErrParentUnreachable, not counted.
	NoSlice bool `json:"noSlice,omitempty"`
}

// Deadline is when the holder must stop spending the grant's units: sent
// (a time.Now() reading taken just before the request was sent) plus
// UsableFor, on both clocks. The holder asks it with a fresh time.Now()
// on every decision and spends nothing once it has passed on either.
func (g Grant) Deadline(sent time.Time) lease.Deadline { return lease.DeadlineAfter(sent, g.UsableFor) }

// Leases lend budget to holders through the log (cluster/DESIGN.md,
// "Leases"): grants, returns and refunds, a type of its own over a narrow
// interface, as the budgets are, so it is tested without a cluster
// (leases_test.go). A request is validated once, on the node asked; it
// goes to the leader by the one leader-operation rule (leaseRoute); the
// leader writes the entry stamped by its clock (leaseLog).
type Leases struct {
	route leaseRoute
	log   leaseLog
	table budgetTable
	// clocks says whether every voter continues cluster time across a
	// failover (clockcheck.go): then no grant needs the clock allowance
	// at its window's end.
	clocks interface{ votersContinueTime() bool }
	// local is this node's lease holder (holder.go), which a refund gives
	// units back into first; nil: none.
	local interface{ refund(hits []Hit) []int64 }
	obs   LeaseObserver
	// maxClockOffset is the cluster's --max-clock-offset.
	maxClockOffset time.Duration
	tracer         *tracer
}

// leaseRoute runs a grant or a return on the leader, here or forwarded,
// by the one retry rule (leaderOp.retrying) within the apply timeout.
type leaseRoute interface {
	grant(ctx context.Context, w grantWire) (grantWire, error)
	giveBack(ctx context.Context, w returnWire) (returnWire, error)
}

// leaseLog writes one lease entry on the leader, stamped by the leader
// clock (Node.applyLease); the answer is the state machine's.
type leaseLog interface {
	applyLease(grant bool, encode func(now int64) []byte) (any, error)
}

// LeaseFor is the lease to ask for so that a grant stays usable for
// usable: a token bucket's grant is usable the cluster's --max-clock-offset
// less than its lease (usableFor), so it is asked that much longer. Every
// holder (this node's, the lease API's, the quota service's) asks through
// it, so the bound lives here with the rule that takes it off.
func (l *Leases) LeaseFor(bucket bool, usable time.Duration) time.Duration {
	if bucket {
		usable += l.maxClockOffset
	}
	return min(usable, lease.MaxLease)
}

// usableFor is Valid less the lease margin, and the clock bound where
// the grant ends with its window or the bucket's cap (lease.UsableFor).
func usableFor(valid time.Duration, bucket bool, toWindowEnd, maxClockOffset time.Duration) time.Duration {
	return lease.UsableFor(valid, bucket, toWindowEnd, maxClockOffset)
}

// toWindowEnd is how long after now the earliest window of a grant's
// parts ends: the fixed and sliding windows its units belong to (the
// state machine cuts the grant's expiry there too). 0 for a token bucket.
func toWindowEnd(now int64, parts []window.Result) time.Duration {
	end := int64(0)
	for _, p := range parts {
		if p.WindowMs > 0 && p.WindowStart > 0 {
			if e := p.WindowStart + p.WindowMs; end == 0 || e < end {
				end = e
			}
		}
	}
	if end == 0 {
		return 0
	}
	return time.Duration(max(1, end-now)) * time.Millisecond
}

// ReturnRequest gives back Units of grant ID that Holder has not spent and
// promises never to spend (0: everything was spent; the grant is released).
type ReturnRequest struct {
	Policy string `json:"policy"`
	Client string `json:"client"`
	Holder string `json:"holder"`
	ID     uint64 `json:"id"`
	Units  int64  `json:"units"`
}

// Grant lends units of one key to a holder through the log: on the leader
// one grant entry, on a follower forwarded to the leader. The units count
// as spent from the moment the entry applies. An error means nothing is
// lent that the holder may use (if the entry did apply and the answer was
// lost, the units stay spent until the grant expires: under-admission,
// never over). Errors: ErrUnknownPolicy, ErrNotLeased, bad input, or a
// failure wrapping ErrNotCounted or ErrOutcomeUnknown.
func (l *Leases) Grant(ctx context.Context, req GrantRequest) (Grant, error) {
	gs, err := l.Grants(ctx, req.Holder, req.Lease, []GrantItem{{Policy: req.Policy, Client: req.Client, Want: req.Want}})
	if err != nil {
		return Grant{}, err
	}
	if gs[0].Units == 0 && gs[0].ID == 0 {
		return gs[0], gs[0].err()
	}
	return gs[0], nil
}

// Grants lends units of several keys to one holder in one entry (a node
// prefetching its hot keys). Per item, a Grant with ID 0 is a policy that
// is unknown or not leased, or a mirrored key with no live slice (Units
// 0; Grant.err says which).
func (l *Leases) Grants(ctx context.Context, holder string, leaseLen time.Duration, items []GrantItem) (_ []Grant, err error) {
	ctx, span := l.tracer.start(ctx, "rlnode.grant", attribute.String("rlnode.holder", holder), attribute.Int("rlnode.items", len(items)))
	defer func() { fail(span, err); span.End() }()
	if err := validateGrants(holder, leaseLen, items); err != nil {
		return nil, notCounted(nil, err)
	}
	if leaseLen == 0 {
		leaseLen = lease.DefaultLease
	}
	req := grantWire{Holder: holder, LeaseMs: leaseLen.Milliseconds(), Items: items}
	wire, err := l.route.grant(ctx, req)
	if err == nil && len(wire.Grants) != len(items) {
		err = outcomeUnknown(fmt.Errorf("leader answered %d grants for %d items", len(wire.Grants), len(items)))
		return nil, err
	}
	return wire.Grants, err
}

func validateGrants(holder string, leaseLen time.Duration, items []GrantItem) error {
	if err := fsm.ValidateHolder(holder); err != nil {
		return err
	}
	if leaseLen < 0 || leaseLen > lease.MaxLease || (leaseLen > 0 && leaseLen < time.Millisecond) {
		return fmt.Errorf("lease %s out of range (1ms to %s)", leaseLen, lease.MaxLease)
	}
	if len(items) == 0 || len(items) > maxGrantItems {
		return fmt.Errorf("%d grant items: want 1 to %d", len(items), maxGrantItems)
	}
	for _, it := range items {
		if err := it.Validate(); err != nil {
			return err
		}
	}
	return nil
}

func validateReturns(holder string, items []fsm.ReturnItem) error {
	if err := fsm.ValidateHolder(holder); err != nil {
		return err
	}
	if len(items) == 0 || len(items) > maxGrantItems {
		return fmt.Errorf("%d return items: want 1 to %d", len(items), maxGrantItems)
	}
	for _, it := range items {
		if err := it.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// err is the error of a grant that named no lendable policy.
func (g Grant) err() error {
	if g.NoSlice {
		return notCounted(ErrParentUnreachable, nil)
	}
	if g.Parts == nil {
		return fmt.Errorf("%w %q", ErrUnknownPolicy, g.Policy)
	}
	return fmt.Errorf("%w: %q", ErrNotLeased, g.Policy)
}

// grantLocal writes the grant entry on the leader.
func (l *Leases) grantLocal(holder string, leaseLen time.Duration, items []GrantItem) ([]Grant, error) {
	res, err := l.log.applyLease(true, func(now int64) []byte { return fsm.EncodeGrant(now, holder, leaseLen.Milliseconds(), items) })
	if err != nil {
		return nil, err
	}
	gr, ok := res.(*fsm.GrantsResult)
	if !ok {
		return nil, outcomeUnknown(fmt.Errorf("unexpected apply response %T", res))
	}
	out := make([]Grant, len(items))
	for i, r := range gr.Grants {
		g := Grant{Policy: items[i].Policy, Client: items[i].Client, Holder: holder, Now: gr.Now}
		switch {
		case r.UnknownPolicy:
		case r.NotLeased:
			g.Parts = []window.Result{}
		case r.NoSlice:
			g.Parts, g.NoSlice = r.Parts, true
		default:
			if p, ok := l.table.Policy(items[i].Policy); ok {
				g.Algorithm = p.Alg().String()
			}
			g.Units, g.ID, g.Expiry, g.Parts = r.Units, r.Index, r.Exp, r.Parts
			if r.Units > 0 {
				g.Valid = time.Duration(r.Exp-gr.Now) * time.Millisecond
				toEnd := toWindowEnd(gr.Now, r.Parts)
				if l.clocks.votersContinueTime() {
					toEnd = 0 // no leader can move the window's end: no allowance there
				}
				g.UsableFor = usableFor(g.Valid, g.Algorithm == window.TokenBucket.String(), toEnd, l.maxClockOffset)
			}
			if r.Main >= 0 && r.Main < len(r.Parts) {
				m := r.Parts[r.Main]
				g.WindowStart, g.ResetAt, g.Remaining = m.WindowStart, m.ResetAt, m.Remaining
			}
		}
		l.obs.LeaseGranted(items[i].Policy, g.Units)
		out[i] = g
	}
	return out, nil
}

// Return gives back unspent units of a grant; it reports how many went
// back to the budget (0 when the grant had ended or its window was over:
// the units stay spent, the safe side).
func (l *Leases) Return(ctx context.Context, req ReturnRequest) (int64, error) {
	if req.ID == fsm.RefundIndex {
		return 0, notCounted(nil, errors.New("grant id 0 names no grant"))
	}
	got, err := l.Returns(ctx, req.Holder, []fsm.ReturnItem{{Policy: req.Policy, Client: req.Client, Index: req.ID, Units: req.Units}})
	if err != nil {
		return 0, err
	}
	return got[0], nil
}

// RefundHolder is the holder a refund's return entry names; a refund
// names no grant, so no holder's grant is touched.
const RefundHolder = "refund"

// Refund takes each hit's Cost off the current window of its key, what
// an Envoy descriptor's is_negative_hits asks. A key of a leased policy
// this node holds grants for gets its refund there first: up to what
// this node spent from its live grants goes back into them (no log
// entry). The rest goes in one log entry through the leader: return items
// naming no grant (fsm.RefundIndex), taken off the key's count, never
// below zero, and not at all while holders hold units of the key. It
// reports per hit the units refunded. Bad input refunds nothing (not
// counted); a log part that fails after units went back into this node's
// grants is outcome unknown, never not counted (a retry would give them
// back twice).
func (l *Leases) Refund(ctx context.Context, hits []Hit) ([]int64, error) {
	// Bad input refunds nothing: checked before any unit goes back into
	// this node's grants, as the log's part would be.
	all := make([]fsm.ReturnItem, len(hits))
	for i, h := range hits {
		all[i] = fsm.ReturnItem{Policy: h.Policy, Client: h.Client, Index: fsm.RefundIndex, Units: h.Cost}
	}
	if err := validateReturns(RefundHolder, all); err != nil {
		return nil, notCounted(nil, err)
	}
	out := make([]int64, len(hits))
	if l.local != nil {
		out = l.local.refund(hits)
	}
	var items []fsm.ReturnItem
	var at []int
	for i, h := range hits {
		if rest := h.Cost - out[i]; rest > 0 {
			items = append(items, fsm.ReturnItem{Policy: h.Policy, Client: h.Client, Index: fsm.RefundIndex, Units: rest})
			at = append(at, i)
		}
	}
	if len(items) == 0 {
		return out, nil
	}
	got, err := l.Returns(ctx, RefundHolder, items)
	if err != nil {
		given := int64(0)
		for _, u := range out {
			given += u
		}
		if given > 0 {
			// Part of the refund went back into this node's grants: it is
			// not "not counted", and a caller retrying it would give
			// those units back twice.
			return nil, outcomeUnknown(fmt.Errorf("%d units went back into this node's grants, the rest may not have been refunded (%v)", given, err))
		}
		return nil, err
	}
	for j, i := range at {
		out[i] += got[j]
	}
	return out, nil
}

// Returns gives back unspent units of several grants of one holder in one
// entry.
func (l *Leases) Returns(ctx context.Context, holder string, items []fsm.ReturnItem) ([]int64, error) {
	if err := validateReturns(holder, items); err != nil {
		return nil, notCounted(nil, err)
	}
	wire, err := l.route.giveBack(ctx, returnWire{Holder: holder, Items: items})
	if err == nil && len(wire.Returned) != len(items) {
		return nil, outcomeUnknown(fmt.Errorf("leader answered %d returns for %d items", len(wire.Returned), len(items)))
	}
	return wire.Returned, err
}

// returnLocal writes the return entry on the leader.
func (l *Leases) returnLocal(holder string, items []fsm.ReturnItem) ([]int64, error) {
	res, err := l.log.applyLease(false, func(now int64) []byte { return fsm.EncodeReturn(now, holder, items) })
	if err != nil {
		return nil, err
	}
	rr, ok := res.(*fsm.ReturnsResult)
	if !ok {
		return nil, outcomeUnknown(fmt.Errorf("unexpected apply response %T", res))
	}
	for i, u := range rr.Returned {
		if items[i].Index != fsm.RefundIndex {
			l.obs.LeaseReturned(items[i].Policy, u)
		}
	}
	return rr.Returned, nil
}

// applyLease writes one lease entry stamped by the leader clock, never
// with a clock that is off.
//
// grant: the entry lends units; the leader clock counts it in flight
// until it applied or failed, and refuses it (not counted) while cluster
// time waits to catch up after an outage.
func (n *Node) applyLease(grant bool, encode func(now int64) []byte) (any, error) {
	now, err := n.stampNow(grant)
	if errors.Is(err, errCatchingUp) {
		return nil, notCounted(nil, err)
	}
	if err != nil {
		return nil, notCounted(ErrNotLeader, err)
	}
	if grant {
		defer n.clock.grantDone()
	}
	f := n.apply(encode(now), n.cfg.ApplyTimeout)
	if err := f.Error(); err != nil {
		return nil, classifyApply(err)
	}
	if err, ok := f.Response().(error); ok {
		return nil, outcomeUnknown(err)
	}
	return f.Response(), nil
}

// grantWire and returnWire are the JSON bodies of GrantPath and ReturnPath
// (requests and answers share them).
type grantWire struct {
	Holder  string      `json:"holder"`
	LeaseMs int64       `json:"leaseMs"`
	Items   []GrantItem `json:"items,omitempty"`
	Grants  []Grant     `json:"grants,omitempty"`
}

type returnWire struct {
	Holder   string           `json:"holder"`
	Items    []fsm.ReturnItem `json:"items,omitempty"`
	Returned []int64          `json:"returned,omitempty"`
}

// The leader operations of leases (the forwarding rule of leaderops.go).
var (
	opGrant = leaderOp[grantWire, grantWire]{name: "grant", bounded: true,
		check: func(r grantWire) error {
			if r.LeaseMs < 1 {
				return fmt.Errorf("grant: leaseMs %d", r.LeaseMs)
			}
			return validateGrants(r.Holder, time.Duration(r.LeaseMs)*time.Millisecond, r.Items)
		},
		run: func(n *Node, _ context.Context, r grantWire) (grantWire, error) {
			gs, err := n.leases.grantLocal(r.Holder, time.Duration(r.LeaseMs)*time.Millisecond, r.Items)
			return grantWire{Holder: r.Holder, Grants: gs}, err
		}}
	opReturn = leaderOp[returnWire, returnWire]{name: "return",
		check: func(r returnWire) error { return validateReturns(r.Holder, r.Items) },
		run: func(n *Node, _ context.Context, r returnWire) (returnWire, error) {
			got, err := n.leases.returnLocal(r.Holder, r.Items)
			return returnWire{Holder: r.Holder, Returned: got}, err
		}}
)

// The node's route for leases and budgets: the leader-operation rule,
// within the apply timeout.
func (r nodeRoute) grant(ctx context.Context, w grantWire) (grantWire, error) {
	return opGrant.retrying(ctx, r.n, w, r.n.cfg.ApplyTimeout)
}

func (r nodeRoute) giveBack(ctx context.Context, w returnWire) (returnWire, error) {
	return opReturn.retrying(ctx, r.n, w, r.n.cfg.ApplyTimeout)
}
