package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/window"
)

// Counter is an admin counter write: fsm.CounterSet or fsm.CounterInc of N
// on (Policy, Client).
type Counter = fsm.Counter

// ErrOverLimit: a set above what the policy's smallest limit allows.
var ErrOverLimit = errors.New("the count is above the policy's limit")

func checkCounter(c Counter) error {
	if err := (Hit{Policy: c.Policy, Client: c.Client, Cost: 1}).Validate(); err != nil {
		return err
	}
	switch {
	case c.Kind != fsm.CounterSet && c.Kind != fsm.CounterInc:
		return fmt.Errorf("counter kind %d unknown", c.Kind)
	case c.N < 0 || c.N > fsm.MaxLimit+1 || (c.Kind == fsm.CounterInc && c.N < 1):
		return fmt.Errorf("count %d out of range", c.N)
	}
	return nil
}

// opWriteCounter writes the counter entry on the leader.
var opWriteCounter = leaderOp[Counter, CheckResult]{name: "write-counter", wait: true,
	check: checkCounter,
	run:   writeCounter}

func writeCounter(n *Node, _ context.Context, c Counter) (CheckResult, error) {
	now, err := n.stampNow(false)
	if err != nil {
		return CheckResult{}, errors.Join(ErrNotLeader, err)
	}
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
		return out, fmt.Errorf("%w: set %d, and policy %q allows at most %d in a window; nothing changed", ErrOverLimit, c.N, c.Policy, h.Parts[h.Main].Limit)
	}
	return out, nil
}
