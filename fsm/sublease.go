package fsm

import (
	"slices"

	"github.com/rlnode/rlnode/window"
)

// Sub-leases: a grant of a mirrored global policy (a node's lease,
// client.Local, an Envoy quota stream in the region) lends units of the
// key's live slices, never of a window of its own (region/DESIGN.md,
// "Sub-leases"). The grant
//
//   - takes its units out of live slices of the current term when it
//     applies, earliest expiry first, and counts them as spent there, so
//     strict hits, other grants and withdrawals see only what is left;
//   - ends at the earliest expiry of the slices it took from (the same
//     leader's stamps as the grant's own time), so its holder's deadline
//     falls before the regional leader's slice deadline;
//   - carries the slice's global window (resetAt, windowStart);
//   - on return gives units back only into the slices it took them from,
//     and only while they are live in the term that wrote them; otherwise
//     they are lost (under-admission, never over).
//
// Sub-lease grants live and die with the slices they came from: they are
// not in snapshots or digests either (appendGrants), because their units
// were decided from state a snapshot does not carry.

// sliceTake is what one sub-lease took from one slice.
type sliceTake struct {
	grant uint64
	units int64
}

// grantSliced lends up to it.Want units of a mirrored key's live slices.
// With no live units it answers NoSlice (the holder backs off and its
// hits go through the log, which waits for a slice), unless the parent
// said the window is spent: then nothing, with its Retry-After.
func (f *FSM) grantSliced(now int64, index uint64, holder string, leaseMs int64, it GrantItem, p *tablePolicy) GrantResult {
	key := string(appendKey(nil, []byte(it.Policy), []byte(it.Client)))
	f.settle(key, now, false)
	l := p.limits[0]
	r := GrantResult{Parts: []window.Result{{Outcome: window.Refused, Limit: l.Limit, WindowMs: l.WindowMs}}}
	part := &r.Parts[0]
	k := f.sliceKeyFor(key)
	if k == nil {
		r.NoSlice = true
		return r
	}
	k.prune(now, f.term)
	// Only slices of one global window, the earliest live slice's: a
	// grant's units all belong to the window its answer names.
	held, first := int64(0), -1
	for i := range k.slices {
		s := &k.slices[i]
		if s.exp <= now || s.left == 0 || (first >= 0 && s.resetAt != k.slices[first].resetAt) {
			continue
		}
		if first < 0 {
			first = i
			part.ResetAt, part.WindowStart = s.resetAt, s.windowStart
		}
		held += s.left
	}
	gs := f.grants[key]
	others := int64(0)
	for _, g := range gs {
		if g.holder != holder && g.term == f.term {
			others += g.want
		}
	}
	room := held
	if len(gs) >= maxGrantsPerKey {
		room = 0
	}
	units := min(it.Want, room, share(room, it.Want, others))
	part.Remaining = held
	if units <= 0 {
		if held > 0 {
			r.Index = index // too many grants of the key: nothing now, as for any key
			return r
		}
		if k.dryTerm == int64(f.term) && k.dryUntil > now {
			part.RetryAfterMs = k.dryUntil - now
			if part.ResetAt == 0 {
				part.ResetAt = k.dryReset
			}
			r.Index = index
			return r
		}
		k.short += it.Want
		r.NoSlice = true
		return r
	}
	g := grant{holder: holder, index: index, units: units, want: it.Want, exp: now + leaseMs, epoch: p.epoch,
		term: f.term, starts: make([]int64, 1)}
	need := units
	for i := first; need > 0 && i < len(k.slices); i++ {
		s := &k.slices[i]
		if s.exp <= now || s.left == 0 || s.resetAt != part.ResetAt {
			continue
		}
		take := min(s.left, need)
		s.left -= take
		need -= take
		g.from = append(g.from, sliceTake{grant: s.grant, units: take})
		g.exp = min(g.exp, s.exp) // the first one's: slices are by expiry
	}
	g.starts[0] = part.WindowStart
	k.spent += units // lent units are demand for the region's holder too
	f.addGrant(key, g)
	part.Outcome, part.Remaining = window.Allowed, held-units
	r.Units, r.Index, r.Exp = units, index, g.exp
	return r
}

// sliceKeyFor is the key's slice state, made on first sight (nil past
// MaxSliceKeys).
func (f *FSM) sliceKeyFor(key string) *sliceKey {
	if k := f.slices[key]; k != nil {
		return k
	}
	if f.slices == nil {
		f.slices = map[string]*sliceKey{}
	}
	if len(f.slices) >= MaxSliceKeys {
		return nil
	}
	k := &sliceKey{}
	f.slices[key] = k
	return k
}

// returnSliced gives up to units of sub-lease g back into the slices it
// took them from, each at most what it took, latest slice first, and
// only into slices still live in the term that wrote them (and the
// grant). What finds no such slice is lost: its units stay spent.
func (f *FSM) returnSliced(now int64, key string, g grant, units int64) int64 {
	k := f.slices[key]
	if k == nil || g.term != f.term || units <= 0 {
		return 0
	}
	back := int64(0)
	for i := len(g.from) - 1; i >= 0 && units > 0; i-- {
		t := g.from[i]
		j := slices.IndexFunc(k.slices, func(s slice) bool { return s.grant == t.grant })
		if j < 0 {
			continue
		}
		s := &k.slices[j]
		if s.term != f.term || s.exp <= now {
			continue
		}
		n := min(t.units, units)
		s.left += n
		units -= n
		back += n
	}
	return back
}
