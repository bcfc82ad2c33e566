package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

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
	// NoSlice: the policy is a region's mirror of a global budget and
	// the region holds no slice of the key (fsm.HitResult.NoSlice);
	// nothing was decided. Check and CheckOne never return it: they wait
	// for a slice, else fail with ErrParentUnreachable.
	NoSlice bool
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
	o = n.awaitSlices(ctx, group(hits), o)
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
	now, err := n.stampNow(false)
	if err != nil {
		// Never stamp hits with a clock that is off: not counted, so
		// the caller's node retries with the next leader.
		err := notCounted(ErrNotLeader, err)
		fail(span, err)
		span.End()
		return func() []outcome { return failAll(len(reqs), err) }
	}
	n.cfg.Observer.BatchApplied(len(hits))
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
			UnknownPolicy: r.UnknownPolicy, NoSlice: r.NoSlice, Parts: r.Parts, Main: r.Main}
		res.Allowed = res.Allowed && r.Counted
	}
	return res
}

// submitLocal hands groups to this node's leader batcher (forwarding's view
// of its own node).
func (n *Node) submitLocal(ctx context.Context, reqs ...group) []outcome {
	return n.leaderBatch.submit(ctx, reqs...)
}

// CheckOne counts one validated hit: the front ends' path, one call per
// request. The policy is looked up once; a cost the table shows can never
// be allowed is answered without the log (the log decides the same case
// when the table here has not caught up with a new policy); a hot key of
// a leased policy is decided from the lease this node holds, without a
// context or timer; everything else goes through the log within timeout
// (none if 0). A hit of a concurrency policy is not counted (res says
// whose it is). res is reset and filled; reuse it for the next check once
// done with this one. Errors are *HitError, as CheckAll's.
func (n *Node) CheckOne(ctx context.Context, vh ValidHit, timeout time.Duration, res *OneResult) error {
	*res = OneResult{}
	hit := vh.hit
	if hit.Client == "" {
		return notCounted(nil, errNotValidated)
	}
	res.Policy, res.Known = n.fsm.Policy(hit.Policy)
	// A shadow policy never refuses: the log answers even a cost it
	// could never allow, allowed and would-refuse.
	prechecked := res.Known && !res.Policy.IsShadow()
	if prechecked && res.Policy.IsConcurrency() {
		return nil // permits, not hits: the caller says so
	}
	if prechecked {
		if i, never := res.Policy.NeverAllows(hit.Cost); never {
			res.NeverAllowed, res.Beyond = true, i
			return nil
		}
	}
	if err := fsm.ValidateCost(hit.Cost); err != nil {
		return notCounted(nil, err)
	}
	if n.holder != nil {
		if res.Known && res.Policy.IsLeased() {
			one := [1]Hit{hit}
			if r, ok := n.holder.decide(one[:], &res.buf); ok {
				n.views.record(r)
				res.CheckResult = r
				return nil
			}
		}
		n.holder.countLog(1) // as CheckAll: every hit through the log
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	o := n.decide(ctx, group{hit})
	o = n.awaitSlices(ctx, group{hit}, o)
	if o.err == nil {
		n.views.record(o.res)
	}
	res.CheckResult = o.res
	return o.err
}

// MaxIndependent is the most hits one independent check carries
// (gubernator's batch size, POST /v1/check with "independent": true).
const MaxIndependent = 1000

// CheckEach decides each hit on its own, as if each were a check of one:
// one hit refused takes nothing from the others. The hits are handed to
// the batcher together, so they share log entries (up to Config.MaxBatch
// hits each) with each other and with concurrent checks. Leased policies
// are decided through the log too (strict, exact). results[i] is the
// decision on hits[i] when errs[i] is nil; errs[i] is a *HitError
// (ErrNotCounted or ErrOutcomeUnknown) otherwise. An invalid hit fails
// alone, not counted.
func (n *Node) CheckEach(ctx context.Context, hits []Hit) (results []CheckResult, errs []error) {
	results, errs = make([]CheckResult, len(hits)), make([]error, len(hits))
	if len(hits) == 0 || len(hits) > MaxIndependent {
		err := notCounted(nil, fmt.Errorf("%d hits in one independent check: want 1 to %d", len(hits), MaxIndependent))
		for i := range errs {
			errs[i] = err
		}
		return results, errs
	}
	var groups []group
	var at []int
	for i, h := range hits {
		if err := h.Validate(); err != nil {
			errs[i] = notCounted(nil, err)
			continue
		}
		groups, at = append(groups, group{h}), append(at, i)
	}
	if len(groups) == 0 {
		return results, errs
	}
	var outs []outcome
	if n.IsLeader() {
		outs = n.leaderBatch.submit(ctx, groups...)
		// Lost the lead before they were queued: not counted, so they
		// go to whoever leads now.
		var again []int
		for j, o := range outs {
			if o.err != nil && errors.Is(o.err, ErrNotLeader) {
				again = append(again, j)
			}
		}
		if len(again) > 0 {
			retry := make([]group, len(again))
			for k, j := range again {
				retry[k] = groups[j]
			}
			for k, o := range n.fwdBatch.submit(ctx, retry...) {
				outs[again[k]] = o
			}
		}
	} else {
		outs = n.fwdBatch.submit(ctx, groups...)
	}
	for j, o := range outs {
		i := at[j]
		results[i], errs[i] = o.res, o.err
		if o.err == nil {
			if results[i].Decided == "" {
				results[i].Decided = DecidedLog
			}
			n.views.record(o.res)
		}
	}
	return results, errs
}
