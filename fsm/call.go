package fsm

import (
	"fmt"
	"hash/fnv"

	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/window"
)

// Per-call keys live in the same key map and slab as policy keys, under a
// policy part that no policy name can have (a control byte, then the
// item's name), so they share expiry, snapshots and digests. Their epoch
// is callEpoch whatever the policy table does: deleting a policy must not
// refill every gubernator bucket.
const (
	callMarker = 0x01
	callEpoch  = uint32(0)
)

// isCallPolicy reports whether a key's policy part is a per-call name.
func isCallPolicy(name string) bool { return len(name) > 0 && name[0] == callMarker }

// CallName is the item name of a per-call key's policy part, and whether
// it is one (for listings such as top keys).
func CallName(policyPart string) (string, bool) {
	if !isCallPolicy(policyPart) {
		return "", false
	}
	return policyPart[1:], true
}

// CallOutcome is the decision on one per-call item.
type CallOutcome struct {
	window.CallResult
	// Full: the item would store a new key, and the stored per-call keys
	// are at the entry's bound (node-wide, or its owner's); nothing was
	// decided or stored.
	Full bool
	// Policy: the table has a policy of the item's name, which decided it
	// instead of the item's own limit (the operator's policy wins).
	Policy bool
	// Err: that policy cannot decide a hit (it counts permits).
	Err string
	// Lease operations (GLOBAL items, call_lease.go). Grant: Units lent,
	// GrantIndex the grant's id (0: nothing lendable from this key now,
	// see Leasable), Expiry its end in FSM time; the CallResult describes
	// the key after the grant (Reset: the window's last instant). Return:
	// Units given back.
	Units      int64
	GrantIndex uint64
	Expiry     int64
	// UsableMs is set by the leader, not the state machine: how long
	// after sending its request the holder may spend the grant (0: not
	// at all; cluster's callCommitter.usableMs).
	UsableMs int64
	// Leasable: the key is live with the item's parameters, so the
	// holder may ask it again (a grant of 0 units means its window is
	// spent); false: decide the item through the log instead.
	Leasable bool
}

// CallsResult is what Apply returns for a calls entry, one outcome per item.
type CallsResult struct {
	Now   int64
	Items []CallOutcome
}

// callCounts is derived from the slab (rebuilt on restore, not state):
// the stored per-call keys in all and per owner id.
type callCounts struct {
	total   int64
	byOwner map[int64]int64
}

// callOwnerID is the owner's id as a slot stores it: a hash in [1,
// MaxWindowMs], so it fits where a limit's window length goes. Two
// owners sharing an id share their bound, which only makes it stricter.
func callOwnerID(owner string) int64 {
	h := fnv.New64a()
	h.Write([]byte(owner))
	return 1 + int64(h.Sum64()%uint64(MaxWindowMs-1))
}

func (f *FSM) applyCalls(l *raft.Log) any {
	e, err := decodeCalls(l.Data)
	if err != nil {
		return f.halt(fmt.Errorf("index %d: %w", l.Index, err))
	}
	now := f.clock(l.Term, e.Now)
	f.expire(now, f.cfg.ExpireBudget+len(e.Items))
	f.sweep(f.cfg.ExpireBudget)
	f.expireGrants(now, f.cfg.ExpireBudget)
	f.last = nil
	owner := callOwnerID(e.Owner)
	res := &CallsResult{Now: now, Items: make([]CallOutcome, len(e.Items))}
	for i, it := range e.Items {
		p := f.policies[it.Name]
		switch {
		case it.Lease.Grant || it.Lease.Return:
			// A policy of the name decides its items; it lends nothing here.
			if p == nil {
				res.Items[i] = f.applyCallLease(now, l.Index, it)
			} else {
				res.Items[i] = CallOutcome{Policy: true}
			}
		case p != nil:
			res.Items[i] = f.callByPolicy(now, p, it)
		default:
			res.Items[i] = f.applyCall(now, it, owner, &e)
		}
	}
	return res
}

// applyCall decides one item with its own limit and stores what
// gubernator would store.
//
// Every replica must refuse the same new keys, and a replica restored
// from a snapshot holds only live keys while another may still hold dead
// ones its expiry budget has not freed. So a slot's expiry never moves
// earlier (the call state's own ExpireAt says when it decides as new; a
// token reset writes a fresh state), which keeps its heap item due no
// later than the slot dies; a dead slot found here is freed first, with
// every key that came due, so the item decides as on a replica that never
// had it; and the bound is checked on counts that, after that full
// expiry, are exactly the live keys.
func (f *FSM) applyCall(now int64, it CallItem, owner int64, e *CallsEntry) CallOutcome {
	f.key = append(f.key[:0], byte(1+len(it.Name)), callMarker)
	f.key = append(append(f.key, it.Name...), it.Key...)
	idx, found := f.index[string(f.key)]
	if found && !f.alive(f.slab.At(idx), now) {
		f.expire(now, len(f.heap))
		idx, found = f.index[string(f.key)]
	}
	var st window.CallState
	if found {
		if w := f.slab.At(idx); w.alg == it.Call.Alg {
			st = readCallState(w)
		}
		owner = f.slab.At(idx).first.windowMs // a live key stays its creator's
	}
	r, ns := window.ApplyCall(it.Call, st, now)
	if found {
		// Units lent from the old window stay out of a new one.
		r, ns = f.heldInNewWindow(string(f.key), it.Call, st, now, r, ns)
	}
	if r.Forget {
		if found {
			writeCallState(f.slab.Mut(idx), it.Call.Alg, window.CallState{}, owner)
		}
		return CallOutcome{CallResult: r}
	}
	if !found {
		if !f.roomForCall(now, owner, e) {
			return CallOutcome{Full: true}
		}
		idx = f.insert(string(f.key))
		f.countCall(owner, 1)
	}
	w := f.slab.Mut(idx)
	writeCallState(w, it.Call.Alg, ns, owner)
	if !found {
		f.heap.push(w.exp, idx)
	}
	return CallOutcome{CallResult: r}
}

// roomForCall reports whether an item may store a new key. Past the
// bound it first frees every key that came due, so the counts are the
// live keys, the same on every replica.
func (f *FSM) roomForCall(now, owner int64, e *CallsEntry) bool {
	fits := func() bool {
		return f.calls.total < e.MaxKeys && f.calls.byOwner[owner] < e.MaxKeysPerOwner
	}
	if fits() {
		return true
	}
	f.expire(now, len(f.heap))
	return fits()
}

func (f *FSM) countCall(owner, d int64) {
	if f.calls.byOwner == nil {
		f.calls.byOwner = make(map[int64]int64)
	}
	f.calls.total += d
	if n := f.calls.byOwner[owner] + d; n > 0 {
		f.calls.byOwner[owner] = n
	} else {
		delete(f.calls.byOwner, owner)
	}
}

// callRemoved is remove's hook: a freed per-call slot leaves the counts.
func (f *FSM) callRemoved(s *slot) {
	if isCallSlot(s) {
		f.countCall(s.first.windowMs, -1)
	}
}

// recountCalls rebuilds the counts from the slab (after a restore).
func (f *FSM) recountCalls() {
	f.calls = callCounts{}
	for i := range f.slab.Len() {
		if s := f.slab.At(uint32(i)); isCallSlot(s) {
			f.countCall(s.first.windowMs, 1)
		}
	}
}

func isCallSlot(s *slot) bool {
	return len(s.key) > 1 && s.key[1] == callMarker && (s.alg == window.CallTokenBucket || s.alg == window.LeakyBucket)
}

// A per-call key's state in a slot, three limit states (snapshots and
// digests store them as any key's):
//
//	first:  A Start, B Remaining, C ExpireAt; windowMs the owner id
//	second: A Limit, B Duration, C Burst; windowMs 1 + flags (1 Over, 2 Gregorian)
//	third:  A Frac, B RateMs, C 0; windowMs 1
func readCallState(w *slot) window.CallState {
	if w.n != 3 || w.more == nil || len(*w.more) < 2 {
		return window.CallState{}
	}
	a, b, c := w.first, (*w.more)[0], (*w.more)[1]
	flags := b.windowMs - 1
	return window.CallState{Start: a.s.A, Remaining: a.s.B, ExpireAt: a.s.C,
		Limit: b.s.A, Duration: b.s.B, Burst: b.s.C, Frac: c.s.A, RateMs: c.s.B,
		Over: flags&1 != 0, Gregorian: flags&2 != 0}
}

func writeCallState(w *slot, alg window.Algorithm, s window.CallState, owner int64) {
	w.alg, w.epoch, w.n = alg, callEpoch, 3
	if w.more == nil || len(*w.more) < 2 {
		m := make([]limState, 2)
		w.more = &m
	}
	flags := int64(1)
	if s.Over {
		flags++
	}
	if s.Gregorian {
		flags += 2
	}
	w.first = limState{s: window.State{A: s.Start, B: s.Remaining, C: s.ExpireAt}, windowMs: owner}
	(*w.more)[0] = limState{s: window.State{A: s.Limit, B: s.Duration, C: s.Burst}, windowMs: flags}
	(*w.more)[1] = limState{s: window.State{A: s.Frac, B: s.RateMs}, windowMs: 1}
	// Alive while now <= ExpireAt, as gubernator's cache keeps an item;
	// never earlier than before (applyCall).
	exp := s.ExpireAt + 1
	if s.ExpireAt >= window.MaxTime {
		exp = window.MaxTime
	}
	w.exp = max(w.exp, exp)
}

// callByPolicy decides an item by the table's policy of its name, as a
// strict hit of cost Hits on (name, unique_key); Hits 0 reads the key.
func (f *FSM) callByPolicy(now int64, p *tablePolicy, it CallItem) CallOutcome {
	if p.p.IsConcurrency() {
		return CallOutcome{Policy: true, Err: fmt.Sprintf("policy %q counts concurrent permits and cannot decide a hit", p.p.Name)}
	}
	parts := make([]window.Result, len(p.limits))
	var r HitResult
	if it.Call.Hits == 0 {
		f.key = appendKey(f.key[:0], []byte(it.Name), []byte(it.Key))
		var s *slot
		if idx, ok := f.index[string(f.key)]; ok {
			if w := f.slab.At(idx); f.alive(w, now) && w.alg == p.alg {
				s = w
			}
		}
		for i, l := range p.limits {
			var ls window.State
			if s != nil {
				ls = s.stateFor(i, l.WindowMs)
			}
			parts[i] = window.Peek(p.alg, l, ls, now)
		}
		r = HitResult{Outcome: window.Allowed, Parts: parts, Main: window.MostConstraining(parts)}
	} else {
		out := make([]HitResult, 1)
		hv := []hitView{{policy: []byte(it.Name), client: []byte(it.Key), cost: it.Call.Hits, group: 1}}
		f.applyGroup(now, hv, out, parts)
		r = out[0]
	}
	o := CallOutcome{Policy: true}
	o.Over = r.Outcome != window.Allowed
	if r.Main >= 0 && r.Main < len(r.Parts) {
		m := r.Parts[r.Main]
		o.Limit, o.Remaining, o.Reset = m.Limit, m.Remaining, m.ResetAt
	}
	return o
}
