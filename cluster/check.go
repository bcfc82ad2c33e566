package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/window"
)

// ValidateClient checks a client id before anything reaches the log; it is
// the same rule the log decoder enforces.
func ValidateClient(id string) error { return fsm.ValidateClient(id) }

// MaxClientLen is the longest client id accepted, in bytes.
const MaxClientLen = fsm.MaxClientLen

// CheckResult is the decision for one hit and what a response needs.
type CheckResult struct {
	Policy   string
	Client   string
	Decision window.Decision
	// Now is the applied time of the entry that decided the hit (Unix ms).
	Now      int64
	Limit    int64
	WindowMs int64
	// ServedBy is the id of the node whose log entry decided the hit.
	ServedBy string
}

// Check counts one hit of cost against (policy, client) and returns the
// decision. Any node can be asked: the leader decides through its log,
// followers forward to it. Errors wrap ErrNotCounted or ErrOutcomeUnknown.
func (n *Node) Check(ctx context.Context, policy, client string, cost int64) (CheckResult, error) {
	req := hitReq{Policy: policy, Client: client, Cost: cost}
	if err := validateReq(req); err != nil {
		return CheckResult{}, errors.Join(ErrNotCounted, err)
	}
	if _, ok := n.policies[policy]; !ok {
		return CheckResult{}, errors.Join(ErrNotCounted, fmt.Errorf("%w %q", ErrUnknownPolicy, policy))
	}
	var o outcome
	if n.IsLeader() {
		o = n.leaderBatch.submit(ctx, req)[0]
		if o.err == nil || !errors.Is(o.err, ErrNotLeader) {
			return o.res, o.err
		}
		// Lost leadership before the entry was queued: not counted, so
		// it is safe to send it to whoever leads now.
	}
	o = n.fwdBatch.submit(ctx, req)[0]
	return o.res, o.err
}

// applyBatch is the leader's flush: one log entry for the whole batch,
// stamped with the leader's clock.
func (n *Node) applyBatch(reqs []hitReq) func() []outcome {
	hits := make([]fsm.Hit, len(reqs))
	for i, r := range reqs {
		p := n.policies[r.Policy]
		hits[i] = fsm.Hit{Policy: r.Policy, Client: r.Client, Limit: p.Limit, WindowMs: p.Window.Milliseconds(), Cost: r.Cost}
	}
	if n.clockCheck.skewed.Load() {
		// Never stamp hits with a clock that is off: not counted, so
		// the caller's node retries with the next leader.
		err := errors.Join(ErrNotCounted, ErrNotLeader, ErrClockSkew)
		return func() []outcome { return failAll(len(reqs), err) }
	}
	n.cfg.Observer.BatchApplied(len(reqs))
	now := n.clock.nowMs(n.raft.CurrentTerm())
	f := n.raft.Apply(fsm.AppendHits(make([]byte, 0, 16+len(reqs)*40), now, hits), n.cfg.ApplyTimeout)
	return func() []outcome {
		if err := f.Error(); err != nil {
			return failAll(len(reqs), classifyApply(err))
		}
		switch resp := f.Response().(type) {
		case *fsm.HitsResult:
			outs := make([]outcome, len(reqs))
			for i, d := range resp.Decisions {
				outs[i].res = CheckResult{Policy: reqs[i].Policy, Client: reqs[i].Client, Decision: d, Now: resp.Now,
					Limit: hits[i].Limit, WindowMs: hits[i].WindowMs, ServedBy: n.cfg.ID}
			}
			return outs
		case error:
			// Committed but not applied (the state machine halted).
			return failAll(len(reqs), errors.Join(ErrOutcomeUnknown, resp))
		default:
			return failAll(len(reqs), errors.Join(ErrOutcomeUnknown, fmt.Errorf("unexpected apply response %T", resp)))
		}
	}
}

// forwardBatch is the follower's flush: one request to the leader carries
// the whole batch.
func (n *Node) forwardBatch(reqs []hitReq) func() []outcome {
	return func() []outcome {
		return n.forwardUntil(reqs, time.Now().Add(n.cfg.ApplyTimeout))
	}
}

// forwardUntil sends reqs to whoever leads. Attempts that certainly did not
// count (the leader refused with not-leader, the connection could not be
// opened) are retried until deadline, following leadership as it moves.
// With no leader known at all it gives up after NoLeaderWait, so a node cut
// off from the majority fails fast instead of holding callers.
func (n *Node) forwardUntil(reqs []hitReq, deadline time.Time) []outcome {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	backoff := 10 * time.Millisecond
	var last error = ErrNoLeader
	var leaderless time.Time
	for {
		select {
		case <-n.stop:
			return failAll(len(reqs), errors.Join(ErrNotCounted, ErrClosed))
		default:
		}
		id, addr := n.Leader()
		switch {
		case n.IsLeader():
			leaderless = time.Time{}
			outs := n.leaderBatch.submit(ctx, reqs...)
			if !anyNotLeader(outs) {
				return outs
			}
			last = ErrNotLeader
		case id != "" && addr != "":
			leaderless = time.Time{}
			outs, err := n.forwardOnce(ctx, addr, reqs)
			switch {
			case err == nil && !anyNotCounted(outs):
				return outs
			case err == nil:
				// The leader moved on: keep the answers we have and retry
				// only the hits that certainly did not count.
				return n.retryNotCounted(reqs, outs, deadline)
			case !isDialError(err):
				return failAll(len(reqs), errors.Join(ErrOutcomeUnknown, fmt.Errorf("forward to leader %s: %w", id, err)))
			}
			last = fmt.Errorf("leader %s at %s unreachable: %w", id, addr, err)
		default:
			if leaderless.IsZero() {
				leaderless = time.Now()
			} else if time.Since(leaderless) > n.cfg.NoLeaderWait {
				return failAll(len(reqs), errors.Join(ErrNotCounted, ErrNoLeader))
			}
		}
		if time.Now().Add(backoff).After(deadline) {
			return failAll(len(reqs), errors.Join(ErrNotCounted, last))
		}
		select {
		case <-time.After(backoff):
		case <-n.stop:
		}
		backoff = min(backoff*2, 100*time.Millisecond)
	}
}

func (n *Node) retryNotCounted(reqs []hitReq, outs []outcome, deadline time.Time) []outcome {
	var again []hitReq
	var at []int
	for i, o := range outs {
		if o.err != nil && errors.Is(o.err, ErrNotCounted) {
			again = append(again, reqs[i])
			at = append(at, i)
		}
	}
	if time.Until(deadline) < 20*time.Millisecond {
		return outs
	}
	time.Sleep(20 * time.Millisecond)
	retried := n.forwardUntil(again, deadline)
	for j, i := range at {
		outs[i] = retried[j]
	}
	return outs
}

func anyNotLeader(outs []outcome) bool {
	for _, o := range outs {
		if o.err != nil && errors.Is(o.err, ErrNotLeader) {
			return true
		}
	}
	return false
}

func anyNotCounted(outs []outcome) bool {
	for _, o := range outs {
		if o.err != nil && errors.Is(o.err, ErrNotCounted) {
			return true
		}
	}
	return false
}

func (n *Node) forwardOnce(ctx context.Context, addr string, reqs []hitReq) ([]outcome, error) {
	n.cfg.Observer.Forwarded(len(reqs))
	body := encodeForwardRequest(make([]byte, 0, 8+len(reqs)*32), reqs)
	resp, err := n.peers.do(ctx, http.MethodPost, BaseURL(addr)+ForwardPath, "application/octet-stream", body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("read forward response: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, decodeHTTPError(resp.StatusCode, b)
	}
	return decodeForwardResponse(b, reqs)
}

// ServeForward handles a forwarded batch on the leader and returns the
// encoded response. A node that is not the leader answers every hit with
// not-counted, so the sender retries against the real leader rather than
// this node forwarding again.
func (n *Node) ServeForward(ctx context.Context, body []byte) ([]byte, error) {
	reqs, err := decodeForwardRequest(body)
	if err != nil {
		return nil, err
	}
	for _, r := range reqs {
		if _, ok := n.policies[r.Policy]; !ok {
			return nil, fmt.Errorf("%w: %w %q", ErrBadForward, ErrUnknownPolicy, r.Policy)
		}
	}
	var outs []outcome
	if n.IsLeader() {
		outs = n.leaderBatch.submit(ctx, reqs...)
	} else {
		outs = failAll(len(reqs), errors.Join(ErrNotCounted, ErrNotLeader))
	}
	return encodeForwardResponse(make([]byte, 0, 16+len(outs)*48), n.cfg.ID, outs), nil
}
