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

// Hit is one hit a caller asks for: cost against (policy, client).
type Hit = fsm.Hit

// MaxGroup is the most hits one all-or-nothing check may carry.
const MaxGroup = 64

// HitResult is the decision on one hit of a check.
type HitResult struct {
	Policy, Client string
	Cost           int64
	// Outcome is the hit's own verdict (Allowed: every limit of its
	// policy had room); whether it was spent is CheckResult.Allowed.
	Outcome       window.Outcome
	UnknownPolicy bool
	// Parts has one result per limit in the policy's order; Main indexes
	// the most constraining one (the least remaining, ties to the latest
	// reset).
	Parts []window.Result
	Main  int
}

// MainPart returns the most constraining limit's result.
func (h HitResult) MainPart() window.Result {
	if h.Main >= len(h.Parts) {
		return window.Result{}
	}
	return h.Parts[h.Main]
}

// CheckResult is the decision on one all-or-nothing check.
type CheckResult struct {
	// Allowed: every hit was allowed, so every hit counted. Otherwise none
	// did.
	Allowed bool
	Hits    []HitResult
	// Now is the applied time of the entry that decided the check (Unix ms).
	Now int64
	// ServedBy is the id of the node whose log entry decided the check.
	ServedBy string
}

// Check counts one hit of cost against (policy, client): CheckAll of one hit.
func (n *Node) Check(ctx context.Context, policyName, client string, cost int64) (CheckResult, error) {
	return n.CheckAll(ctx, []Hit{{Policy: policyName, Client: client, Cost: cost}})
}

// CheckAll checks hits all or nothing in one log entry: they count only if
// every one is allowed. Any node can be asked: the leader decides through
// its log, followers forward to it. Errors wrap ErrNotCounted or
// ErrOutcomeUnknown.
func (n *Node) CheckAll(ctx context.Context, hits []Hit) (CheckResult, error) {
	if len(hits) == 0 || len(hits) > MaxGroup {
		return CheckResult{}, errors.Join(ErrNotCounted, fmt.Errorf("%d hits in one check: want 1 to %d", len(hits), MaxGroup))
	}
	for _, h := range hits {
		if err := h.Validate(); err != nil {
			return CheckResult{}, errors.Join(ErrNotCounted, err)
		}
	}
	req := group(hits)
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
func (n *Node) applyBatch(reqs []group) func() []outcome {
	hits := make([]fsm.Hit, 0, hitCount(reqs))
	sizes := make([]int, len(reqs))
	for i, g := range reqs {
		hits = append(hits, g...)
		sizes[i] = len(g)
	}
	n.cfg.Observer.BatchApplied(len(hits))
	now := n.clock.nowMs(n.raft.CurrentTerm())
	f := n.raft.Apply(fsm.AppendHits(make([]byte, 0, 16+len(hits)*40), now, hits, sizes), n.cfg.ApplyTimeout)
	return func() []outcome {
		if err := f.Error(); err != nil {
			return failAll(len(reqs), classifyApply(err))
		}
		switch resp := f.Response().(type) {
		case *fsm.HitsResult:
			outs := make([]outcome, len(reqs))
			at := 0
			for i, g := range reqs {
				outs[i].res = n.checkResult(resp, g, at)
				at += len(g)
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

func (n *Node) checkResult(resp *fsm.HitsResult, g group, at int) CheckResult {
	res := CheckResult{Now: resp.Now, ServedBy: n.cfg.ID, Hits: make([]HitResult, len(g)), Allowed: true}
	for j, h := range g {
		r := resp.Hits[at+j]
		res.Hits[j] = HitResult{Policy: h.Policy, Client: h.Client, Cost: h.Cost, Outcome: r.Outcome,
			UnknownPolicy: r.UnknownPolicy, Parts: r.Parts, Main: r.Main}
		res.Allowed = res.Allowed && r.Counted
	}
	return res
}

// forwardBatch is the follower's flush: one request to the leader carries
// the whole batch.
func (n *Node) forwardBatch(reqs []group) func() []outcome {
	return func() []outcome {
		return n.forwardUntil(reqs, time.Now().Add(n.cfg.ApplyTimeout))
	}
}

// forwardUntil sends reqs to whoever leads. Attempts that certainly did not
// count (the leader refused with not-leader, the connection could not be
// opened) are retried until deadline, following leadership as it moves.
// With no leader known at all it gives up after NoLeaderWait, so a node cut
// off from the majority fails fast instead of holding callers.
func (n *Node) forwardUntil(reqs []group, deadline time.Time) []outcome {
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
			case isDefinite(err):
				// The leader answered and refused the request itself (bad
				// request, wrong token): nothing was counted.
				return failAll(len(reqs), errors.Join(ErrNotCounted, err))
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

func (n *Node) retryNotCounted(reqs []group, outs []outcome, deadline time.Time) []outcome {
	var again []group
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

func (n *Node) forwardOnce(ctx context.Context, addr string, reqs []group) ([]outcome, error) {
	n.cfg.Observer.Forwarded(hitCount(reqs))
	body := encodeForwardRequest(make([]byte, 0, 8+hitCount(reqs)*32), reqs)
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
	var outs []outcome
	if n.IsLeader() {
		outs = n.leaderBatch.submit(ctx, reqs...)
	} else {
		outs = failAll(len(reqs), errors.Join(ErrNotCounted, ErrNotLeader))
	}
	return encodeForwardResponse(make([]byte, 0, 16+hitCount(reqs)*64), n.cfg.ID, outs), nil
}

// isDefinite reports whether a peer's HTTP answer is a definite refusal of
// the request (4xx): it was not counted, and retrying will not help.
func isDefinite(err error) bool {
	var he *HTTPError
	return errors.As(err, &he) && he.Status >= 400 && he.Status < 500
}
