package fsm

import (
	"fmt"
	"slices"

	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/window"
)

// Slices: a region decides the keys of a mirrored global policy only
// from parent grants its leader recorded here (region/DESIGN.md has the
// safety argument). A slice is spent only
//
//   - in the term whose leader wrote it: its expiry is that leader's
//     stamp plus what was left of its own deadline, so only that
//     leader's clock gives it a meaning; a new leader never spends an
//     inherited slice (the guard on inherited slices), and slices are
//     kept out of snapshots for the same reason;
//   - while the deciding entry's time is before its expiry (the entry's
//     time is never earlier than its leader's stamp);
//   - never beyond its units: strict hits spend them through the log,
//     and grants of a mirrored policy (sub-leases, sublease.go) take
//     theirs out when they apply, each unit once.

// MaxSliceKeys bounds the keys that have slice state; items for more
// keys are ignored (the region's holder tracks fewer).
const MaxSliceKeys = 4096

type slice struct {
	grant                          uint64
	term                           uint64
	units, left                    int64
	exp                            int64
	resetAt, windowStart, windowMs int64
}

// sliceKey is a key's slices by expiry, the parent's last word that its
// window is spent, and counters the region's holder reads for demand
// (advisory: no decision reads them).
type sliceKey struct {
	slices                       []slice
	dryUntil, dryTerm, dryReset  int64
	spent, short, withdrawn, got int64
}

type sliceUndo struct {
	k     *sliceKey
	grant uint64
	units int64
}

// SlicesResult is what Apply returns for a slices entry: per item, the
// units a withdraw took out of the slice (0 for other kinds).
type SlicesResult struct {
	Now       int64
	Withdrawn []int64
}

func (f *FSM) applySlices(l *raft.Log) any {
	e, err := decodeSlices(l.Data)
	if err != nil {
		return f.halt(fmt.Errorf("index %d: %w", l.Index, err))
	}
	now := f.clock(l.Term, e.now)
	res := &SlicesResult{Now: now, Withdrawn: make([]int64, len(e.items))}
	for i, it := range e.items {
		key := string(appendKey(nil, []byte(it.Policy), []byte(it.Client)))
		k := f.sliceKeyFor(key)
		if k == nil {
			continue
		}
		k.prune(now, f.term)
		switch it.Kind {
		case SliceGrant:
			if it.Units <= 0 || it.UsableMs <= 0 {
				continue
			}
			s := slice{grant: it.Grant, term: l.Term, units: it.Units, left: it.Units, exp: e.now + it.UsableMs,
				resetAt: it.ResetAt, windowStart: it.WindowStart, windowMs: it.WindowMs}
			at, _ := slices.BinarySearchFunc(k.slices, s.exp, func(a slice, exp int64) int { return cmpInt(a.exp, exp) })
			k.slices = slices.Insert(k.slices, at, s)
			k.got += it.Units
			k.dryUntil = 0
		case SliceDry:
			k.dryUntil, k.dryTerm, k.dryReset = e.now+it.UsableMs, int64(l.Term), it.ResetAt
		case SliceWithdraw:
			if j := slices.IndexFunc(k.slices, func(s slice) bool { return s.grant == it.Grant }); j >= 0 {
				res.Withdrawn[i] = k.slices[j].left
				k.withdrawn += k.slices[j].left
				k.slices = slices.Delete(k.slices, j, j+1)
			}
			if len(k.slices) == 0 && (k.dryTerm != int64(l.Term) || k.dryUntil <= now) {
				// The holder retired the key: its counters start again.
				delete(f.slices, key)
			}
		}
	}
	return res
}

// prune drops slices that can never be spent again: expired or of
// another term. A drained slice stays until it expires: a sub-lease
// returned in time gives its units back into it (sublease.go).
func (k *sliceKey) prune(now int64, term uint64) {
	k.slices = slices.DeleteFunc(k.slices, func(s slice) bool { return s.exp <= now || s.term != term })
}

// live is what the key's slices hold for a decision at now in term.
func (k *sliceKey) live(now int64, term uint64) (units int64, last *slice) {
	for i := range k.slices {
		if s := &k.slices[i]; s.term == term && s.exp > now && s.left > 0 {
			units += s.left
			last = s
		}
	}
	return units, last
}

// decideSliced decides one hit of a mirrored global policy from the
// key's slices: allowed when live slices hold its cost (spent earliest
// expiry first, recorded for the group's undo); refused (429) when they
// do not and the parent said the window is spent; otherwise NoSlice
// (nothing decided: the front end waits for a slice or answers 503).
func (f *FSM) decideSliced(now int64, h *hitView, p *tablePolicy, r *HitResult) bool {
	f.key = appendKey(f.key[:0], h.policy, h.client)
	k := f.slices[string(f.key)]
	if k == nil {
		k = f.sliceKeyFor(string(f.key))
	}
	l := p.limits[0]
	part := &r.Parts[0]
	*part = window.Result{Outcome: window.Refused, Limit: l.Limit, WindowMs: l.WindowMs}
	r.Main, r.Outcome = 0, window.Refused
	if k == nil {
		r.NoSlice = true
		return false
	}
	held, last := k.live(now, f.term)
	if last != nil {
		part.ResetAt, part.WindowStart = last.resetAt, last.windowStart
	}
	if held >= h.cost {
		need := h.cost
		for i := 0; need > 0 && i < len(k.slices); i++ {
			s := &k.slices[i]
			if s.term != f.term || s.exp <= now || s.left == 0 {
				continue
			}
			take := min(s.left, need)
			s.left -= take
			need -= take
			f.sliceUndo = append(f.sliceUndo, sliceUndo{k: k, grant: s.grant, units: take})
			part.ResetAt, part.WindowStart = s.resetAt, s.windowStart
		}
		k.spent += h.cost
		part.Outcome, part.Remaining = window.Allowed, held-h.cost
		r.Outcome = window.Allowed
		return true
	}
	k.short += h.cost
	part.Remaining = held
	if k.dryTerm == int64(f.term) && k.dryUntil > now {
		part.RetryAfterMs = k.dryUntil - now
		if part.ResetAt == 0 {
			part.ResetAt = k.dryReset
		}
		return false
	}
	r.NoSlice = true
	return false
}

// undoSliced puts back what the group's sliced hits spent.
func (f *FSM) undoSliced() {
	for j := len(f.sliceUndo) - 1; j >= 0; j-- {
		u := f.sliceUndo[j]
		u.k.spent -= u.units
		if i := slices.IndexFunc(u.k.slices, func(s slice) bool { return s.grant == u.grant }); i >= 0 {
			u.k.slices[i].left += u.units
		}
	}
	f.sliceUndo = f.sliceUndo[:0]
}

// SliceStat is one key's slice state as the region's holder reads it.
type SliceStat struct {
	Policy, Client string
	// Held is what live slices of the current term hold now.
	Held int64
	// Spent (by strict hits, or lent as sub-leases), Short (units of
	// hits and sub-lease requests that found no slice), Withdrawn and
	// Got (units recorded) are running totals since the key's slice
	// state was created on this node.
	Spent, Short, Withdrawn, Got int64
	// Grants lists the live slices' parent grant ids and units left.
	Grants []SliceGrantLeft
}

// SliceGrantLeft is one live slice's parent grant id and units left.
type SliceGrantLeft struct {
	Grant uint64
	Left  int64
	Exp   int64
}

// SliceStats lists every key with slice state (at most MaxSliceKeys).
func (f *FSM) SliceStats() []SliceStat {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]SliceStat, 0, len(f.slices))
	for key, k := range f.slices {
		st := SliceStat{Policy: policyOf(key), Client: key[1+int(key[0]):], Spent: k.spent, Short: k.short,
			Withdrawn: k.withdrawn, Got: k.got}
		for _, s := range k.slices {
			if s.term == f.term && s.exp > f.lastNow && s.left > 0 {
				st.Held += s.left
				st.Grants = append(st.Grants, SliceGrantLeft{Grant: s.grant, Left: s.left, Exp: s.exp})
			}
		}
		out = append(out, st)
	}
	return out
}

// SliceReady reports whether a hit of (policy, client) would be decided
// now rather than found without a slice: live slices hold units, or the
// parent's word that the window is spent is in force.
func (f *FSM) SliceReady(policyName, client string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	k := f.slices[string(appendKey(nil, []byte(policyName), []byte(client)))]
	if k == nil {
		return false
	}
	held, _ := k.live(f.lastNow, f.term)
	return held > 0 || (k.dryTerm == int64(f.term) && k.dryUntil > f.lastNow)
}
