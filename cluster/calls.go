package cluster

import (
	"context"
	"fmt"
	"net/http"

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

// Calls decides every item through one log entry on the leader (forwarded
// when this node does not lead). Items must be valid (fsm.ValidateCallItem:
// front ends answer bad ones per item and leave them out). Errors:
// ErrClusterUpgrading (a voter cannot apply the entry), or a failure
// wrapping ErrNotCounted or ErrOutcomeUnknown, as a hit's.
func (n *Node) Calls(ctx context.Context, req CallsRequest) (CallsAnswer, error) {
	if err := req.check(); err != nil {
		return CallsAnswer{}, notCounted(ErrBadRequest, err)
	}
	out, err := opCalls.retrying(ctx, n, req, n.cfg.ApplyTimeout)
	if err == nil {
		n.recordCallsTop(req.Items, out.Items)
	}
	return out, err
}

// recordCallsTop hands decided items to the top-keys recorder under their
// name (rlnode top lists them beside policies' keys), on the node a
// client asked, as recordTop does for checks.
func (n *Node) recordCallsTop(items []CallItem, outs []CallOutcome) {
	for i, o := range outs {
		if i >= len(items) || o.Full || o.Err != "" {
			continue
		}
		r := topkeys.Allowed
		if o.Over {
			r = topkeys.Refused
		}
		n.views.top.Record(items[i].Name, items[i].Key, r)
	}
}

// callsLocal writes the calls entry on the leader.
func (n *Node) callsLocal(_ context.Context, req CallsRequest) (CallsAnswer, error) {
	return n.callCommit.submit(n, req)
}

var opCalls = leaderOp[CallsRequest, CallsAnswer]{name: "calls",
	format: needs[CallsRequest](fsm.FormatR5),
	check:  CallsRequest.check,
	run:    (*Node).callsLocal}

// mountCallOps serves the calls operation for other nodes.
func (n *Node) mountCallOps(mux *http.ServeMux) {
	mux.HandleFunc("POST "+opCalls.path(), opCalls.handler(n))
}
