package cluster

import (
	"context"
	"fmt"
	"slices"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/topkeys"
)

// Per-call limits (gubernator's V1 API, fsm/DESIGN.md "Per-call
// limits"): a batch of items, each bringing its own limit, decided one by
// one through one log entry on the leader.

// CallItem is one per-call item.
type CallItem = fsm.CallItem

// CallOutcome is the decision on one item.
type CallOutcome = fsm.CallOutcome

// MaxCallsPerRequest is the most items one request carries (gubernator's
// batch size).
const MaxCallsPerRequest = fsm.MaxCallsPerEntry

// Default bounds of stored per-call keys (Config.CallKeys).
const (
	DefaultCallKeys              = 1 << 20
	DefaultCallKeysPerCredential = 1 << 17
)

// CallKeyBounds bounds the per-call keys the cluster stores, in all and
// per credential; the leader's bounds travel in each entry.
type CallKeyBounds struct {
	Total, PerCredential int64
}

// Validate checks 1 <= PerCredential <= Total <= fsm.MaxCallKeys.
func (b CallKeyBounds) Validate() error {
	if b.PerCredential < 1 || b.PerCredential > b.Total || b.Total > fsm.MaxCallKeys {
		return fmt.Errorf("per-call key bounds: %d per credential, %d in all: want 1 <= per credential <= in all <= %d", b.PerCredential, b.Total, fsm.MaxCallKeys)
	}
	return nil
}

func (b CallKeyBounds) orDefault() CallKeyBounds {
	if b == (CallKeyBounds{}) {
		return CallKeyBounds{Total: DefaultCallKeys, PerCredential: DefaultCallKeysPerCredential}
	}
	return b
}

// CallsRequest is a batch of items of one caller (Owner: its credential
// identity, "" without one).
type CallsRequest struct {
	Owner string     `json:"owner,omitempty"`
	Items []CallItem `json:"items"`
	// Global marks the items a node may answer from its leases
	// (gubernator's GLOBAL, callholder.go); it stays on the node asked.
	Global []bool `json:"-"`
}

// CallsAnswer is one outcome per item, in order.
type CallsAnswer struct {
	Now      int64         `json:"now"`
	Items    []CallOutcome `json:"items"`
	ServedBy string        `json:"servedBy,omitempty"`
}

func (r CallsRequest) check() error {
	if len(r.Items) < 1 || len(r.Items) > MaxCallsPerRequest {
		return fmt.Errorf("%d items, want 1 to %d", len(r.Items), MaxCallsPerRequest)
	}
	if len(r.Owner) > fsm.MaxOwnerLen {
		return fmt.Errorf("owner is %d bytes, longer than %d", len(r.Owner), fsm.MaxOwnerLen)
	}
	for i, it := range r.Items {
		if err := fsm.ValidateCallItem(it); err != nil {
			return fmt.Errorf("items[%d]: %w", i, err)
		}
	}
	return nil
}

// Calls decide per-call items through the log: a type of its own over a
// narrow interface, as the budgets are, so it is tested without a
// cluster (calls_test.go). A request is validated once, on the node
// asked; it goes to the leader by the one leader-operation rule
// (callsRoute), where the committer coalesces concurrent requests into
// one entry per owner (callcommit.go).
type Calls struct {
	route  callsRoute
	commit *callCommitter
	// holder answers GLOBAL items from node leases (nil: none, every
	// item goes through the log).
	holder *callHolder
	// top counts decided items on the node a client asked (rlnode top).
	top interface {
		Record(policy, client string, o topkeys.Outcome)
	}
}

// callsRoute runs a calls request on the leader, here or forwarded, by
// the one retry rule (leaderOp.retrying) within the apply timeout.
type callsRoute interface {
	calls(ctx context.Context, req CallsRequest) (CallsAnswer, error)
}

// Decide decides every item through one log entry on the leader
// (forwarded when this node does not lead). Items must be valid
// (fsm.ValidateCallItem: front ends answer bad ones per item and leave
// them out). Errors: ErrClusterUpgrading (a voter cannot apply the
// entry), or a failure wrapping ErrNotCounted or ErrOutcomeUnknown, as a
// hit's.
func (c *Calls) Decide(ctx context.Context, req CallsRequest) (CallsAnswer, error) {
	if err := req.check(); err != nil {
		return CallsAnswer{}, notCounted(ErrBadRequest, err)
	}
	for i, it := range req.Items {
		// Grants and returns are this node's holder's to write, never a
		// caller's.
		if it.Lease != (fsm.CallLease{}) {
			return CallsAnswer{}, notCounted(ErrBadRequest, fmt.Errorf("items[%d]: a lease operation", i))
		}
	}
	out, err := c.decide(ctx, req)
	if err == nil {
		c.recordTop(req.Items, out.Items)
	}
	return out, err
}

// decide answers the GLOBAL items this node can from its leases and sends
// the rest through the log, in one request.
func (c *Calls) decide(ctx context.Context, req CallsRequest) (CallsAnswer, error) {
	if c.holder == nil || !slices.Contains(req.Global, true) {
		return c.route.calls(ctx, req)
	}
	outs, local := make([]CallOutcome, len(req.Items)), make([]bool, len(req.Items))
	n := c.holder.decide(req.Items, req.Global, outs, local)
	if n == 0 {
		return c.route.calls(ctx, req)
	}
	ans := CallsAnswer{Items: outs, ServedBy: c.holder.id}
	if n == len(req.Items) {
		return ans, nil
	}
	rest := CallsRequest{Owner: req.Owner, Items: make([]CallItem, 0, len(req.Items)-n)}
	for i, it := range req.Items {
		if !local[i] {
			rest.Items = append(rest.Items, it)
		}
	}
	got, err := c.route.calls(ctx, rest)
	if err != nil {
		// The local answers spent held units; the caller sees the batch
		// fail (gubernator's client retries or gives up): under-admission.
		return CallsAnswer{}, err
	}
	j := 0
	for i := range outs {
		if !local[i] {
			outs[i] = got.Items[j]
			j++
		}
	}
	ans.Now, ans.ServedBy = got.Now, got.ServedBy
	return ans, nil
}

// recordTop hands decided items to the top-keys recorder under their
// name (rlnode top lists them beside policies' keys), on the node a
// client asked, as recordTop does for checks.
func (c *Calls) recordTop(items []CallItem, outs []CallOutcome) {
	for i, o := range outs {
		if i >= len(items) || o.Full || o.Err != "" {
			continue
		}
		r := topkeys.Allowed
		if o.Over {
			r = topkeys.Refused
		}
		c.top.Record(items[i].Name, items[i].Key, r)
	}
}

// opCalls runs on the leader: the calls entry, through the committer.
var opCalls = leaderOp[CallsRequest, CallsAnswer]{name: "calls",
	format: needs[CallsRequest](fsm.FormatR5),
	check:  CallsRequest.check,
	run: func(n *Node, _ context.Context, req CallsRequest) (CallsAnswer, error) {
		return n.calls.commit.submit(req)
	}}
