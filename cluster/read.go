package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/window"
)

// PeekResult is a client's state under a policy as a read sees it. The
// top-level limit fields describe the most constraining limit; Limits has
// every limit in the policy's order.
type PeekResult struct {
	Client      string      `json:"client"`
	Policy      string      `json:"policy"`
	Algorithm   string      `json:"algorithm"`
	Limit       int64       `json:"limit"`
	WindowMs    int64       `json:"windowMs"`
	Active      bool        `json:"active"`
	Used        int64       `json:"used"`
	Remaining   int64       `json:"remaining"`
	WindowStart int64       `json:"windowStart"`
	ResetAt     int64       `json:"resetAt"`
	Limits      []PeekLimit `json:"limits"`
	// AppliedNow and AppliedIndex say what state the read saw.
	AppliedNow   int64  `json:"appliedNow"`
	AppliedIndex uint64 `json:"appliedIndex"`
	ServedBy     string `json:"servedBy"`
	Stale        bool   `json:"stale,omitempty"`
	// LastWindowStart and LastUsed are a lapsed fixed window as stored
	// (the most constraining limit's), kept until expiry removes it: an
	// inactive window reads used 0 and remaining = limit above, and a
	// checker of the log's history still sees what is stored.
	LastWindowStart int64 `json:"lastWindowStart,omitempty"`
	LastUsed        int64 `json:"lastUsed,omitempty"`
}

// PeekLimit is one limit's state as a read sees it. Used is what a new hit
// competes with: the fixed window's count, the sliding window's current
// count, the tokens missing from a bucket.
type PeekLimit struct {
	Limit       int64 `json:"limit"`
	WindowMs    int64 `json:"windowMs"`
	Active      bool  `json:"active"`
	Used        int64 `json:"used"`
	Remaining   int64 `json:"remaining"`
	ResetAt     int64 `json:"resetAt"`
	WindowStart int64 `json:"windowStart,omitempty"`
	// LastWindowStart and LastUsed: a lapsed fixed window as stored.
	LastWindowStart int64 `json:"lastWindowStart,omitempty"`
	LastUsed        int64 `json:"lastUsed,omitempty"`
}

// Peek reads a client's state without counting a hit. Unless stale is set,
// the read is linearizable: the leader confirms it still leads with a quorum
// and waits until it has applied everything committed when the read began
// (read-index); followers forward to the leader.
func (n *Node) Peek(ctx context.Context, policyName, client string, stale bool) (PeekResult, error) {
	if stale {
		if err := (Hit{Policy: policyName, Client: client, Cost: 1}).Validate(); err != nil {
			return PeekResult{}, err
		}
		return n.peek(ctx, policyName, client, true)
	}
	return opPeek.do(ctx, n, keyRequest{policyName, client})
}

// peek reads a client's state here: after a read barrier (on the leader)
// unless stale.
func (n *Node) peek(ctx context.Context, policyName, client string, stale bool) (PeekResult, error) {
	if !stale {
		if err := n.readBarrier(ctx); err != nil {
			return PeekResult{}, err
		}
	}
	v, ok := n.fsm.Lookup(policyName, client)
	if !ok {
		return PeekResult{}, fmt.Errorf("%w %q", ErrUnknownPolicy, policyName)
	}
	now, ok := n.clock.clusterNowMs()
	if !ok {
		now = n.clock.wallNowMs()
	}
	now = max(now, v.AppliedNow)
	r := PeekResult{Client: client, Policy: policyName, Algorithm: v.Policy.Algorithm,
		AppliedNow: v.AppliedNow, AppliedIndex: v.AppliedIndex, ServedBy: n.cfg.ID, Stale: stale}
	alg := v.Policy.Decider()
	parts := make([]window.Result, len(v.States))
	for i, l := range v.Policy.WindowLimits() {
		pl := peekLimit(alg, l, v.States[i], now)
		r.Limits = append(r.Limits, pl)
		parts[i] = window.Result{Remaining: pl.Remaining, ResetAt: pl.ResetAt}
	}
	m := r.Limits[window.MostConstraining(parts)]
	r.Limit, r.WindowMs, r.Active, r.Used = m.Limit, m.WindowMs, m.Active, m.Used
	r.Remaining, r.WindowStart, r.ResetAt = m.Remaining, m.WindowStart, m.ResetAt
	r.LastWindowStart, r.LastUsed = m.LastWindowStart, m.LastUsed
	return r, nil
}

// peekLimit describes one limit's state at now without changing it.
func peekLimit(alg window.Algorithm, l window.Limit, s window.State, now int64) PeekLimit {
	capacity := l.Limit
	if alg == window.TokenBucket && l.Burst > 0 {
		capacity = l.Burst
	}
	p := PeekLimit{Limit: capacity, WindowMs: l.WindowMs, Remaining: capacity}
	if alg == window.FixedWindow || alg == window.FixedWindowEpoch {
		// The stored window while it is active (an aligned window's
		// start is its aligned start); once it lapsed the next hit opens
		// a new one, so it reads as none (used 0, remaining the limit)
		// and the stored one moves to Last*.
		switch {
		case s == (window.State{}):
		case now-s.A < l.WindowMs:
			p.WindowStart, p.Used = s.A, s.B
			p.Active, p.ResetAt, p.Remaining = true, s.A+l.WindowMs, max(0, l.Limit-s.B)
		default:
			p.LastWindowStart, p.LastUsed = s.A, s.B
		}
		return p
	}
	res := window.Peek(alg, l, s, now)
	p.Limit = res.Limit
	p.Remaining, p.ResetAt, p.WindowStart = res.Remaining, res.ResetAt, res.WindowStart
	p.Used = max(0, res.Limit-res.Remaining)
	p.Active = p.Used > 0
	return p
}

// readBarrier implements read-index on the leader.
func (n *Node) readBarrier(ctx context.Context) error {
	term := n.raft.CurrentTerm()
	if n.readyTerm.Load() != term {
		// A new leader must first apply what earlier leaders committed.
		return errors.Join(ErrNotLeader, errors.New("leader not ready for reads yet"))
	}
	commit := n.raft.CommitIndex()
	if err := n.raft.VerifyLeader().Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return errors.Join(ErrNotLeader, err)
		}
		return fmt.Errorf("verify leadership: %w", err)
	}
	if n.raft.CurrentTerm() != term {
		return errors.Join(ErrNotLeader, errors.New("term changed during the read"))
	}
	return n.waitApplied(ctx, commit)
}
