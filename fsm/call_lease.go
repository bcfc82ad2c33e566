package fsm

import (
	"slices"

	"github.com/rlnode/rlnode/window"
)

// Node leases on per-call keys (gubernator's GLOBAL items; the safety
// argument is in gubapi/DESIGN.md, "GLOBAL"). They reuse the leased
// policies' grant bookkeeping (f.grants, the grant heap, snapshots,
// grantsUntil for the clock): a per-call key's grants are kept under the
// key, with epoch callEpoch and one window start, the window's Start.

// applyCallLease applies a grant or a return item.
func (f *FSM) applyCallLease(now int64, index uint64, it CallItem) CallOutcome {
	f.key = append(f.key[:0], byte(1+len(it.Name)), callMarker)
	f.key = append(append(f.key, it.Name...), it.Key...)
	key := string(f.key)
	f.settle(key, now, false)
	if it.Lease.Return {
		return CallOutcome{Units: f.returnCall(now, key, it.Lease)}
	}
	return f.grantCall(now, index, key, it)
}

// liveCallState is a per-call key's token state at now, and its slot,
// when it is live and has the call's parameters.
func (f *FSM) liveCallState(key string, c window.Call, now int64) (window.CallState, uint32, bool) {
	idx, found := f.index[key]
	if !found {
		return window.CallState{}, 0, false
	}
	w := f.slab.At(idx)
	if !f.alive(w, now) || w.alg != window.CallTokenBucket {
		return window.CallState{}, 0, false
	}
	st := readCallState(w)
	if st.Fresh(now) || st.Limit != c.Limit || st.Duration != c.Duration || st.Gregorian != c.Gregorian {
		return window.CallState{}, 0, false
	}
	return st, idx, true
}

// grantCall lends up to Want units of a live key with the item's
// parameters: taken off Remaining now (counted as spent), until the
// lease or the window's end, whichever is first. It never creates or
// changes a key otherwise (the key bounds and gubernator's change rules
// stay with the strict calls).
func (f *FSM) grantCall(now int64, index uint64, key string, it CallItem) CallOutcome {
	st, idx, ok := f.liveCallState(key, it.Call, now)
	if !ok {
		return CallOutcome{}
	}
	o := CallOutcome{Leasable: true}
	o.Limit, o.Reset = st.Limit, st.ExpireAt
	gs := f.grants[key]
	others := int64(0)
	for _, g := range gs {
		if g.holder != it.Lease.Holder {
			others += g.want
		}
	}
	room := st.Remaining
	if len(gs) >= maxGrantsPerKey {
		room = 0
	}
	k := min(it.Lease.Want, room, share(room, it.Lease.Want, others))
	o.Remaining = st.Remaining
	if k <= 0 {
		o.Over = st.Remaining == 0
		return o
	}
	st.Remaining -= k
	w := f.slab.Mut(idx)
	writeCallState(w, window.CallTokenBucket, st, w.first.windowMs)
	// Alive while now <= ExpireAt: the window's units end at ExpireAt+1.
	g := grant{holder: it.Lease.Holder, index: index, units: k, want: it.Lease.Want,
		exp: min(now+it.Lease.LeaseMs, st.ExpireAt+1), epoch: callEpoch, starts: []int64{st.Start, st.Limit}}
	f.addGrant(key, g)
	o.Remaining, o.Units, o.GrantIndex, o.Expiry = st.Remaining, k, index, g.exp
	return o
}

// returnCall gives back units of the holder's grant, only while it is
// outstanding, only to the window it came from (same Start) and only
// under the limit it was lent under: after a limit change the stored
// remaining was moved by the difference and clamped at 0, which forgets
// how much of it the grant held, so giving units back could pass the new
// limit (they stay spent: under-admission). The grant is dropped either
// way.
func (f *FSM) returnCall(now int64, key string, l CallLease) int64 {
	gs := f.grants[key]
	j := slices.IndexFunc(gs, func(g grant) bool { return g.holder == l.Holder && g.index == l.Index })
	if j < 0 {
		return 0
	}
	g := gs[j]
	f.dropGrants(key, slices.Delete(gs, j, j+1))
	units := min(l.Units, g.units)
	idx, found := f.index[key]
	if units <= 0 || !found || len(g.starts) != 2 {
		return 0
	}
	w := f.slab.At(idx)
	if !f.alive(w, now) || w.alg != window.CallTokenBucket {
		return 0
	}
	st := readCallState(w)
	if st.Fresh(now) || st.Start != g.starts[0] || st.Limit != g.starts[1] {
		return 0
	}
	back := min(units, max(st.Limit-st.Remaining, 0))
	if back <= 0 {
		return 0
	}
	st.Remaining += back
	w = f.slab.Mut(idx)
	writeCallState(w, window.CallTokenBucket, st, w.first.windowMs)
	return back
}

// heldCall is what holders still hold of a per-call key at now.
func (f *FSM) heldCall(key string, now int64) int64 {
	held := int64(0)
	for _, g := range f.grants[key] {
		if g.exp > now && g.epoch == callEpoch {
			held += g.units
		}
	}
	return held
}

// heldInNewWindow keeps units lent from a window out of the next one: when
// a decision (r, ns) on a key with outstanding grants opens a new window
// (its window ended or restarted, or RESET_REMAINING forgot it), the units
// holders still hold count as spent in the new window too, and the call is
// decided against that. Without grants it changes nothing, so gubernator's
// answers stay exact for keys no node leases.
func (f *FSM) heldInNewWindow(key string, c window.Call, st window.CallState, now int64, r window.CallResult, ns window.CallState) (window.CallResult, window.CallState) {
	if len(f.grants[key]) == 0 || c.Alg != window.CallTokenBucket {
		return r, ns
	}
	f.settle(key, now, false)
	held := f.heldCall(key, now)
	if held == 0 || (!r.Forget && !st.Fresh(now) && ns.Start == st.Start) {
		return r, ns
	}
	// Open the new window with nothing taken, take the held units off it,
	// then decide the call there.
	open := c
	open.Hits, open.ResetRemaining, open.DrainOverLimit = 0, false, false
	_, fresh := window.ApplyCall(open, window.CallState{}, now)
	if !st.Fresh(now) && !r.Forget {
		_, fresh = window.ApplyCall(open, st, now) // a restart keeps gubernator's change rules
	}
	fresh.Remaining = max(fresh.Remaining-held, 0)
	if r.Forget {
		// gubernator's reset answers without applying the hit; the key
		// is kept, less what is held, instead of forgotten.
		return window.CallResult{Limit: c.Limit, Remaining: fresh.Remaining}, fresh
	}
	return window.ApplyCall(c, fresh, now)
}
