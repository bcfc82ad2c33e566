package fsm

import (
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/policy"
	"github.com/rlnode/rlnode/window"
)

// HitResult is the decision on one hit.
type HitResult struct {
	// Outcome is the hit's own verdict: Allowed means every limit of its
	// policy had room for it (it counted only if Counted).
	Outcome window.Outcome
	// UnknownPolicy: the policy is not in the table; nothing was decided.
	UnknownPolicy bool
	// Counted: the hit's whole group was allowed, so the hit was spent
	// (unless WouldRefuse).
	Counted bool
	// WouldRefuse: the hit's policy is in shadow mode and refused it
	// (Parts say how); Outcome is Allowed, so it never fails its group,
	// and like any refused hit it changed nothing.
	WouldRefuse bool
	// NoSlice: the hit's policy is a region's mirror of a global budget
	// and the region holds no slice for it, nor has the parent said its
	// window is spent; nothing was decided (slice.go).
	NoSlice bool
	// Parts holds one result per limit in the policy's order; Main indexes
	// the most constraining one.
	Parts []window.Result
	Main  int
}

// HitsResult is what Apply returns for a hits entry, one result per hit in
// entry order.
type HitsResult struct {
	Now  int64
	Hits []HitResult
}

// undoRec lets a failed group put back what its allowed hits changed.
type undoRec struct {
	idx     uint32
	created bool
	old     slot
	states  [policy.MaxLimits - 1]limState
	nstates int
}

func (f *FSM) applyHits(l *raft.Log) any {
	var stamped int64
	var views []hitView
	var err error
	if len(l.Data) > 1 && l.Data[1] == hitsV1 {
		stamped, views, err = decodeHitsV1(l.Data, f.views[:0])
	} else {
		stamped, views, err = decodeHitsV2(l.Data, f.views[:0])
	}
	f.views = views[:0]
	if err != nil {
		return f.halt(fmt.Errorf("index %d: %w", l.Index, err))
	}
	now := f.clock(l.Term, stamped)
	f.expire(now, f.cfg.ExpireBudget+len(views))
	f.sweep(f.cfg.ExpireBudget)
	f.expireGrants(now, f.cfg.ExpireBudget)
	res := &HitsResult{Now: now, Hits: make([]HitResult, len(views))}
	nparts := 0
	f.last = nil
	for i := range views {
		if views[i].limit > 0 {
			nparts++
		} else if p := f.lookupPolicy(views[i].policy); p != nil {
			nparts += len(p.limits)
		}
	}
	parts := make([]window.Result, nparts)
	for at := 0; at < len(views); {
		n := views[at].group
		parts = f.applyGroup(now, views[at:at+n], res.Hits[at:at+n], parts)
		at += n
	}
	return res
}

// applyGroup decides one all-or-nothing group in order (a later hit sees an
// earlier one's effect, so duplicates count in order) and keeps its effect
// only if every hit was allowed. It returns the unused rest of parts.
func (f *FSM) applyGroup(now int64, hits []hitView, out []HitResult, parts []window.Result) []window.Result {
	f.undo, f.sliceUndo = f.undo[:0], f.sliceUndo[:0]
	// A group of one (every single check) needs no undo: it is kept
	// exactly when its hit is allowed.
	track := len(hits) > 1
	ok := true
	for i := range hits {
		h := &hits[i]
		var p *tablePolicy
		var legacy [1]window.Limit
		limits, alg, epoch := legacy[:], window.FixedWindow, uint32(0)
		if h.limit > 0 {
			// Version 1: the hit carries its fixed window.
			legacy[0] = window.Limit{Limit: h.limit, WindowMs: h.windowMs}
			epoch = f.epochOf(string(h.policy))
		} else if p = f.lookupPolicy(h.policy); p != nil {
			limits, alg, epoch = p.limits, p.alg, p.epoch
		} else {
			out[i] = HitResult{UnknownPolicy: true}
			ok = false
			continue
		}
		r := &out[i]
		r.Parts, parts = parts[:len(limits):len(limits)], parts[len(limits):]
		if p != nil && p.p.Mirrored {
			ok = f.decideSliced(now, h, p, r) && ok
			continue
		}
		if f.decide(now, h, alg, limits, epoch, r, track, stepHit) {
			continue
		}
		if p != nil && p.p.IsShadow() {
			shadow(r, h.cost)
			continue
		}
		ok = false
	}
	if !ok {
		for j := len(f.undo) - 1; j >= 0; j-- {
			f.rollback(&f.undo[j])
		}
		f.undoSliced()
		// Nothing was spent: a limit that had room still has it (remaining
		// is linear in cost for every algorithm).
		for i := range out {
			if out[i].WouldRefuse {
				continue // shadow already gave its cost back
			}
			for k := range out[i].Parts {
				if p := &out[i].Parts[k]; p.Outcome == window.Allowed {
					p.Remaining += hits[i].cost
				}
			}
		}
		return parts
	}
	for i := range out {
		out[i].Counted = true
	}
	for j := range f.undo {
		if u := &f.undo[j]; u.created {
			f.heap.push(f.slab.At(u.idx).exp, u.idx)
		}
	}
	return parts
}

// shadow turns a shadow policy's refusal into an allowed answer marked
// WouldRefuse. The hit wrote nothing, so a limit that had room still has
// it, as when a group fails.
func shadow(r *HitResult, cost int64) {
	r.Outcome, r.WouldRefuse = window.Allowed, true
	for k := range r.Parts {
		if p := &r.Parts[k]; p.Outcome == window.Allowed {
			p.Remaining += cost
		}
	}
}

// decide runs one hit against every limit and, when all allow it, writes
// the key's new state (recording how to undo it). It reports whether the
// hit was allowed. st is stepHit on the hit path; counter writes use the
// same update with their own step.
func (f *FSM) decide(now int64, h *hitView, alg window.Algorithm, limits []window.Limit, epoch uint32, r *HitResult, track bool, st step) bool {
	f.key = appendKey(f.key[:0], h.policy, h.client)
	if alg == window.TokenBucket && len(f.grants) > 0 {
		if _, held := f.grants[string(f.key)]; held {
			// Cap the bucket by the tokens holders still hold (lease.go).
			f.settle(string(f.key), now, true)
		}
	}
	idx, found := f.index[string(f.key)]
	var s *slot
	// Live state of this policy incarnation (f.alive, with the epoch the
	// caller already resolved) and algorithm; anything else decides as new.
	if found {
		if w := f.slab.At(idx); w.exp > now && w.epoch == epoch && w.alg == alg {
			s = w // read only: writes go through Mut below
		}
	}
	r.Outcome = window.Allowed
	for i, l := range limits {
		var ls window.State
		if s != nil {
			ls = s.stateFor(i, l.WindowMs)
		}
		if st == stepHit {
			r.Parts[i], f.next[i] = window.Apply(alg, l, ls, now, h.cost)
		} else {
			r.Parts[i], f.next[i] = st.apply(alg, l, ls, now, h.cost)
		}
		switch o := r.Parts[i].Outcome; {
		case o == window.CostExceedsLimit:
			r.Outcome = o
		case o == window.Refused && r.Outcome == window.Allowed:
			r.Outcome = o
		}
	}
	r.Main = window.MostConstraining(r.Parts)
	if r.Outcome != window.Allowed {
		return false
	}
	if !found {
		idx = f.insert(string(f.key))
	}
	if track {
		f.save(idx, !found)
	}
	w := f.slab.Mut(idx)
	w.alg, w.epoch, w.n = alg, epoch, uint8(len(limits))
	if need := len(limits) - 1; need > 0 && (w.more == nil || len(*w.more) < need) {
		m := make([]limState, need) // a new multi-limit key, or more limits than before
		w.more = &m
	}
	exp := int64(0)
	for i, l := range limits {
		*w.state(i) = limState{s: f.next[i], windowMs: l.WindowMs}
		exp = max(exp, window.ExpiresAt(alg, l, f.next[i]))
	}
	w.exp = exp
	if !found && !track {
		f.heap.push(exp, idx)
	}
	return true
}

// stateFor finds the state this key holds for a limit of windowMs: usually
// at the same position, after a policy change possibly elsewhere.
func (s *slot) stateFor(i int, windowMs int64) window.State {
	if i < int(s.n) && s.state(i).windowMs == windowMs {
		return s.state(i).s
	}
	for j := range int(s.n) {
		if st := s.state(j); st.windowMs == windowMs {
			return st.s
		}
	}
	return window.State{}
}

func (f *FSM) save(idx uint32, created bool) {
	f.undo = append(f.undo, undoRec{idx: idx, created: created})
	u := &f.undo[len(f.undo)-1]
	if created {
		return
	}
	u.old = *f.slab.At(idx)
	if m := u.old.more; m != nil {
		u.nstates = copy(u.states[:], *m)
	}
}

func (f *FSM) rollback(u *undoRec) {
	if u.created {
		f.remove(u.idx)
		return
	}
	s := f.slab.Mut(u.idx)
	cur := s.more // this generation's own array (u.old.more may be a snapshot's)
	*s = u.old
	if u.old.more != nil {
		if cur == nil || len(*cur) < u.nstates {
			m := make([]limState, len(*u.old.more))
			cur = &m
		}
		copy(*cur, u.states[:u.nstates])
		s.more = cur
	}
}

// lookupPolicy resolves a hit's policy, remembering the last one: the hits
// of an entry mostly share a few policies, and comparing the name is
// cheaper than hashing it.
func (f *FSM) lookupPolicy(name []byte) *tablePolicy {
	if f.last != nil && f.last.p.Name == string(name) {
		return f.last
	}
	if p := f.policies[string(name)]; p != nil {
		f.last = p
		return p
	}
	return nil
}
