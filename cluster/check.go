package cluster

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/trace"

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

// WouldRefuse reports a shadow policy's refusal: the hit is allowed (its
// policy never refuses) but a limit refused it, as its part says. Only
// shadow policies answer allowed with a part that is not.
func (h HitResult) WouldRefuse() bool {
	if h.Outcome != window.Allowed {
		return false
	}
	for _, p := range h.Parts {
		if p.Outcome != window.Allowed {
			return true
		}
	}
	return false
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
	// ServedBy is the id of the node whose log entry decided the check
	// (or that decided it from a lease it holds).
	ServedBy string
	// Decided says how: DecidedLocal (from a lease this node holds, no
	// log entry) or DecidedLog.
	Decided string
}

// Check counts one hit of cost against (policy, client): CheckAll of one hit.
func (n *Node) Check(ctx context.Context, policyName, client string, cost int64) (CheckResult, error) {
	return n.CheckAll(ctx, []Hit{{Policy: policyName, Client: client, Cost: cost}})
}

// CheckAll checks hits all or nothing in one log entry: they count only if
// every one is allowed. Any node can be asked: the leader decides through
// its log, followers forward to it. Errors are *HitError, matching
// ErrNotCounted or ErrOutcomeUnknown.
func (n *Node) CheckAll(ctx context.Context, hits []Hit) (CheckResult, error) {
	if len(hits) == 0 || len(hits) > MaxGroup {
		return CheckResult{}, notCounted(nil, fmt.Errorf("%d hits in one check: want 1 to %d", len(hits), MaxGroup))
	}
	for _, h := range hits {
		if err := h.Validate(); err != nil {
			return CheckResult{}, notCounted(nil, err)
		}
	}
	if n.holder != nil {
		if res, ok := n.holder.decide(hits, nil); ok {
			n.views.record(res)
			return res, nil
		}
		n.holder.countLog(len(hits))
	}
	o := n.decide(ctx, group(hits))
	if o.err == nil {
		n.views.record(o.res)
	}
	return o.res, o.err
}

// decide runs a group through the leader's batcher here, or forwards it.
func (n *Node) decide(ctx context.Context, req group) outcome {
	if n.IsLeader() {
		o := n.leaderBatch.submitOne(ctx, req)
		if o.err == nil || !errors.Is(o.err, ErrNotLeader) {
			return o
		}
		// Lost leadership before the entry was queued: not counted, so
		// it is safe to send it to whoever leads now.
	}
	o := n.fwdBatch.submitOne(ctx, req)
	o.res.Decided = DecidedLog
	return o
}

// applyBatch is the leader's flush: one log entry for the whole batch,
// stamped with the leader's clock.
func (n *Node) applyBatch(reqs []group, from []trace.SpanContext) func() []outcome {
	_, span := n.tracer.startBatch(context.Background(), "rlnode.commit", from, hitCount(reqs))
	hits := make([]fsm.Hit, 0, hitCount(reqs))
	sizes := make([]int, len(reqs))
	for i, g := range reqs {
		hits = append(hits, g...)
		sizes[i] = len(g)
	}
	if n.clockCheck.skewed.Load() {
		// Never stamp hits with a clock that is off: not counted, so
		// the caller's node retries with the next leader.
		err := notCounted(ErrNotLeader, ErrClockSkew)
		fail(span, err)
		span.End()
		return func() []outcome { return failAll(len(reqs), err) }
	}
	n.cfg.Observer.BatchApplied(len(hits))
	now := n.clock.nowMs(n.raft.CurrentTerm())
	f := n.apply(fsm.AppendHits(make([]byte, 0, 16+len(hits)*40), now, hits, sizes), n.cfg.ApplyTimeout)
	return func() []outcome {
		defer span.End()
		if err := f.Error(); err != nil {
			fail(span, err)
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
			return failAll(len(reqs), outcomeUnknown(resp))
		default:
			return failAll(len(reqs), outcomeUnknown(fmt.Errorf("unexpected apply response %T", resp)))
		}
	}
}

func (n *Node) checkResult(resp *fsm.HitsResult, g group, at int) CheckResult {
	res := CheckResult{Now: resp.Now, ServedBy: n.cfg.ID, Decided: DecidedLog, Hits: make([]HitResult, len(g)), Allowed: true}
	for j, h := range g {
		r := resp.Hits[at+j]
		res.Hits[j] = HitResult{Policy: h.Policy, Client: h.Client, Cost: h.Cost, Outcome: r.Outcome,
			UnknownPolicy: r.UnknownPolicy, Parts: r.Parts, Main: r.Main}
		res.Allowed = res.Allowed && r.Counted
	}
	return res
}

// submitLocal hands groups to this node's leader batcher (forwarding's view
// of its own node).
func (n *Node) submitLocal(ctx context.Context, reqs ...group) []outcome {
	return n.leaderBatch.submit(ctx, reqs...)
}
