package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/hashicorp/raft"
)

// PeekPath is the public linearizable read of one client's window.
const PeekPath = "/v1/status/"

// PeekResult is a client's window as a read sees it.
type PeekResult struct {
	Client      string `json:"client"`
	Policy      string `json:"policy"`
	Limit       int64  `json:"limit"`
	WindowMs    int64  `json:"windowMs"`
	Active      bool   `json:"active"`
	Used        int64  `json:"used"`
	Remaining   int64  `json:"remaining"`
	WindowStart int64  `json:"windowStart"`
	ResetAt     int64  `json:"resetAt"`
	// AppliedNow and AppliedIndex say what state the read saw.
	AppliedNow   int64  `json:"appliedNow"`
	AppliedIndex uint64 `json:"appliedIndex"`
	ServedBy     string `json:"servedBy"`
	Stale        bool   `json:"stale,omitempty"`
}

// Peek reads a client's window without counting a hit. Unless stale is set,
// the read is linearizable: the leader confirms it still leads with a quorum
// and waits until it has applied everything committed when the read began
// (read-index); followers forward to the leader.
func (n *Node) Peek(ctx context.Context, policy, client string, stale, forwarded bool) (PeekResult, error) {
	p, ok := n.policies[policy]
	if !ok {
		return PeekResult{}, fmt.Errorf("%w %q", ErrUnknownPolicy, policy)
	}
	if err := validateReq(hitReq{Policy: policy, Client: client, Cost: 1}); err != nil {
		return PeekResult{}, err
	}
	if !stale && !n.IsLeader() {
		if forwarded {
			return PeekResult{}, ErrNotLeader
		}
		return n.forwardPeek(ctx, client)
	}
	if !stale {
		if err := n.readBarrier(ctx); err != nil {
			return PeekResult{}, err
		}
	}
	w, found, appliedNow, appliedIndex := n.fsm.Lookup(policy, client)
	r := PeekResult{Client: client, Policy: policy, Limit: p.Limit, WindowMs: p.Window.Milliseconds(),
		AppliedNow: appliedNow, AppliedIndex: appliedIndex, ServedBy: n.cfg.ID, Stale: stale, Remaining: p.Limit}
	if found {
		r.WindowStart, r.Used = w.Start, w.Count
		now := max(n.clock.wallNowMs(), appliedNow)
		if now-w.Start < w.WindowMs {
			r.Active, r.ResetAt, r.Remaining = true, w.Start+w.WindowMs, max(0, p.Limit-w.Count)
		}
	}
	return r, nil
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

func (n *Node) forwardPeek(ctx context.Context, client string) (PeekResult, error) {
	base, err := n.leaderURL()
	if err != nil {
		return PeekResult{}, err
	}
	resp, err := n.peers.do(ctx, http.MethodGet, base+PeekPath+url.PathEscape(client), "", nil)
	if err != nil {
		return PeekResult{}, fmt.Errorf("forward read to leader: %w", err)
	}
	defer resp.Body.Close()
	var r PeekResult
	if resp.StatusCode != http.StatusOK {
		b := make([]byte, 64<<10)
		k, _ := resp.Body.Read(b)
		return r, fmt.Errorf("forward read to leader: %w", decodeHTTPError(resp.StatusCode, b[:k]))
	}
	if err := decodeJSON(resp.Body, &r); err != nil {
		return r, fmt.Errorf("forward read to leader: %w", err)
	}
	return r, nil
}
