package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/window"
)

// Counter is an admin counter write: fsm.CounterSet or fsm.CounterInc of N
// on (Policy, Client).
type Counter = fsm.Counter

// CounterRequest is the body of POST /v1/windows/:policy/:client: exactly
// one of Set (0 or more, within the policy's limit) and Inc (1 or more).
type CounterRequest struct {
	Set *int64 `json:"set,omitempty"`
	Inc *int64 `json:"inc,omitempty"`
}

// ErrOverLimit: a set above what the policy's smallest limit allows.
var ErrOverLimit = errors.New("the count is above the policy's limit")

// WriteCounter sets a key's used count or counts without a limit check,
// through the log with the leader's clock, and returns the key as it
// stands afterwards. On a follower it goes to the leader.
func (n *Node) WriteCounter(ctx context.Context, c Counter, forwarded bool) (CheckResult, error) {
	if err := (Hit{Policy: c.Policy, Client: c.Client, Cost: 1}).Validate(); err != nil {
		return CheckResult{}, err
	}
	if c.N < 0 || c.N > fsm.MaxLimit+1 || (c.Kind == fsm.CounterInc && c.N < 1) || (c.Kind != fsm.CounterSet && c.Kind != fsm.CounterInc) {
		return CheckResult{}, fmt.Errorf("count %d out of range", c.N)
	}
	if !n.IsLeader() {
		req := CounterRequest{Set: &c.N}
		if c.Kind == fsm.CounterInc {
			req = CounterRequest{Inc: &c.N}
		}
		// A forwarded write is answered with the CheckResult itself.
		var out CheckResult
		err := n.fwd.adminMethod(ctx, forwarded, http.MethodPost,
			WindowsPath+"/"+url.PathEscape(c.Policy)+"/"+url.PathEscape(c.Client), req, &out)
		return out, err
	}
	if n.clockCheck.skewed.Load() {
		return CheckResult{}, errors.Join(ErrNotLeader, ErrClockSkew)
	}
	now := n.clock.nowMs(n.raft.CurrentTerm())
	res, err := n.applyAdmin(fsm.EncodeCounter(now, c))
	if err != nil {
		return CheckResult{}, fmt.Errorf("%s/%s: %w", c.Policy, c.Client, err)
	}
	r := res.(*fsm.CounterResult)
	h := r.Hit
	out := CheckResult{Allowed: h.Counted, Now: r.Now, ServedBy: n.cfg.ID, Hits: []HitResult{{Policy: c.Policy, Client: c.Client, Cost: c.N,
		Outcome: h.Outcome, UnknownPolicy: h.UnknownPolicy, Parts: h.Parts, Main: h.Main}}}
	switch {
	case h.UnknownPolicy:
		return out, fmt.Errorf("%w %q", ErrUnknownPolicy, c.Policy)
	case h.Outcome == window.CostExceedsLimit:
		return out, fmt.Errorf("%w: set %d", ErrOverLimit, c.N)
	}
	return out, nil
}
