package fsm

import (
	"container/heap"
	"fmt"
	"math/bits"
	"slices"

	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/window"
)

// grant is one outstanding grant of a key: units taken out of the key's
// budget for holder until exp (FSM time). starts holds, per limit of the
// policy as it was, the window the units were counted in (fixed: its
// anchored start; sliding: its aligned start; token bucket: 0), so a
// return gives units back only to that window.
type grant struct {
	holder string
	index  uint64
	units  int64
	want   int64
	exp    int64
	epoch  uint32
	starts []int64
	// term and from: a sub-lease of a mirrored key's slices (sublease.go)
	// names the term it was made in and what it took from which slice.
	term uint64
	from []sliceTake
}

// GrantResult is the FSM's answer to one grant item.
type GrantResult struct {
	// UnknownPolicy: no such policy. NotLeased: the policy is strict, so
	// nothing may be granted. Either way Units is 0.
	UnknownPolicy, NotLeased bool
	// NoSlice: the policy is a region's mirror of a global budget and no
	// live slice holds units of the key (nor did the parent say its
	// window is spent): nothing granted, nothing decided; the holder
	// backs off and its hits go through the log, which waits for a slice.
	NoSlice bool
	// Units granted (0 when the budget has no room).
	Units int64
	// Index is the grant's id: the index of the entry that made it.
	Index uint64
	// Exp is when the grant ends, in FSM time: the lease, cut at the end
	// of the window its units belong to.
	Exp int64
	// Parts describe each limit after the grant (Remaining: what is left
	// to others); Main the most constraining.
	Parts []window.Result
	Main  int
}

// GrantsResult is what Apply returns for a grant entry.
type GrantsResult struct {
	Now    int64
	Grants []GrantResult
}

// ReturnsResult is what Apply returns for a return entry: per item, the
// units given back to the budget (0 when the grant had expired, was
// unknown, or its window had ended).
type ReturnsResult struct {
	Now      int64
	Returned []int64
}

func (f *FSM) applyGrant(l *raft.Log) any {
	e, err := decodeGrant(l.Data)
	if err != nil {
		return f.halt(fmt.Errorf("index %d: %w", l.Index, err))
	}
	now := f.leaseClock(l.Term, e.now)
	res := &GrantsResult{Now: now, Grants: make([]GrantResult, len(e.items))}
	for i, it := range e.items {
		res.Grants[i] = f.grantOne(now, l.Index, e.holder, e.leaseMs, it)
	}
	return res
}

func (f *FSM) applyReturn(l *raft.Log) any {
	e, err := decodeReturn(l.Data)
	if err != nil {
		return f.halt(fmt.Errorf("index %d: %w", l.Index, err))
	}
	now := f.leaseClock(l.Term, e.now)
	res := &ReturnsResult{Now: now, Returned: make([]int64, len(e.items))}
	for i, it := range e.items {
		res.Returned[i] = f.returnOne(now, e.holder, it)
	}
	return res
}

// leaseClock is the clock and the bounded expiry work every stamped entry
// does (as applyHits does).
func (f *FSM) leaseClock(term uint64, stamped int64) int64 {
	now := f.clock(term, stamped)
	f.expire(now, f.cfg.ExpireBudget)
	f.sweep(f.cfg.ExpireBudget)
	f.expireGrants(now, f.cfg.ExpireBudget)
	f.expirePermits(now, f.cfg.ExpireBudget)
	f.last = nil
	return now
}

// grantOne takes up to it.Want units out of the key's budget: a hit of
// cost k on every limit, k the least of want, the room every limit has,
// and the holder's proportional share of that room.
func (f *FSM) grantOne(now int64, index uint64, holder string, leaseMs int64, it GrantItem) GrantResult {
	p := f.policies[it.Policy]
	switch {
	case p == nil:
		return GrantResult{UnknownPolicy: true}
	case !p.p.IsLeased():
		return GrantResult{NotLeased: true}
	case p.p.Mirrored:
		// A region lends its slices of a global budget as sub-leases
		// (sublease.go).
		return f.grantSliced(now, index, holder, leaseMs, it, p)
	}
	key := string(appendKey(nil, []byte(it.Policy), []byte(it.Client)))
	f.settle(key, now, true)
	states := f.liveStates(key, p, now)
	room := int64(window.MaxTime)
	for i, l := range p.limits {
		room = min(room, window.Room(p.alg, l, states[i], now))
	}
	gs := f.grants[key]
	others := int64(0)
	for _, g := range gs {
		if g.holder != holder {
			others += g.want
		}
	}
	if len(gs) >= maxGrantsPerKey {
		room = 0
	}
	k := min(it.Want, room, share(room, it.Want, others))
	r := GrantResult{Index: index, Parts: make([]window.Result, len(p.limits))}
	if k <= 0 {
		for i, l := range p.limits {
			r.Parts[i] = window.Peek(p.alg, l, states[i], now)
		}
		r.Main = window.MostConstraining(r.Parts)
		return r
	}
	hv := hitView{policy: []byte(it.Policy), client: []byte(it.Client), cost: k}
	hr := HitResult{Parts: r.Parts}
	if !f.decide(now, &hv, p.alg, p.limits, p.epoch, &hr, false, stepHit) {
		// Room said k fits; a refusal here is a bug in Room, and the safe
		// answer is nothing granted (decide changed nothing).
		r.Main = hr.Main
		return r
	}
	g := grant{holder: holder, index: index, units: k, want: it.Want, exp: now + leaseMs, epoch: p.epoch,
		starts: make([]int64, len(p.limits))}
	for i, part := range hr.Parts {
		g.starts[i] = part.WindowStart
		if p.alg != window.TokenBucket {
			g.exp = min(g.exp, part.WindowStart+part.WindowMs)
		}
	}
	f.addGrant(key, g)
	r.Units, r.Exp, r.Main = k, g.exp, hr.Main
	return r
}

// share is Doorman's proportional share of room for a holder wanting want
// while other holders' outstanding grants wanted others: ceil(room × want /
// (want + others)), at least 1 when room > 0.
func share(room, want, others int64) int64 {
	if room <= 0 || others <= 0 {
		return room
	}
	hi, lo := bits.Mul64(uint64(room), uint64(want))
	d := uint64(want) + uint64(others)
	q, rem := bits.Div64(hi, lo, d) // room*want/(want+others) < room: no overflow
	if rem > 0 {
		q++
	}
	return max(int64(q), 1)
}

func (f *FSM) addGrant(key string, g grant) {
	gs := f.grants[key]
	f.grantsUntil = max(f.grantsUntil, g.exp)
	at, _ := slices.BinarySearchFunc(gs, g, cmpGrant)
	f.grants[key] = slices.Insert(gs, at, g)
	heap.Push(&f.grantHeap, grantDue{at: g.exp, key: key, index: g.index})
}

func cmpGrant(a, b grant) int {
	switch {
	case a.exp != b.exp:
		return cmpInt(a.exp, b.exp)
	default:
		return cmpInt(a.index, b.index)
	}
}

func cmpInt[T int64 | uint64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// returnOne gives back units of one grant, only to the window the grant
// was counted in and only while the grant is outstanding; the grant is
// dropped either way.
func (f *FSM) returnOne(now int64, holder string, it ReturnItem) int64 {
	key := string(appendKey(nil, []byte(it.Policy), []byte(it.Client)))
	f.settle(key, now, true)
	if it.Index == RefundIndex {
		if p := f.policies[it.Policy]; p != nil && p.p.Mirrored {
			// A mirrored key has no window here: its units are the
			// parent's, counted there.
			return 0
		}
		if len(f.grants[key]) > 0 {
			// Granted units must stay counted while held, and the count
			// does not say which of them were spent: the safe side.
			return 0
		}
		return f.refund(now, key, f.policies[it.Policy], it.Units, nil)
	}
	gs := f.grants[key]
	j := slices.IndexFunc(gs, func(g grant) bool { return g.holder == holder && g.index == it.Index })
	if j < 0 {
		return 0
	}
	g := gs[j]
	f.dropGrants(key, slices.Delete(gs, j, j+1))
	if g.from != nil {
		return f.returnSliced(now, key, g, min(it.Units, g.units))
	}
	p := f.policies[it.Policy]
	if p == nil || g.epoch != p.epoch || len(g.starts) != len(p.limits) {
		return 0
	}
	return f.refund(now, key, p, min(it.Units, g.units), g.starts)
}

// refund takes units off every limit of a live key of p, each limit i in
// the window starts[i] when starts is given (a grant's), else in the
// current one (a refund, window.RefundCurrent); it reports units, or 0
// when nothing changed.
func (f *FSM) refund(now int64, key string, p *tablePolicy, units int64, starts []int64) int64 {
	if p == nil || units <= 0 {
		return 0
	}
	idx, found := f.index[key]
	if !found {
		return 0
	}
	if s := f.slab.At(idx); !(s.exp > now && s.epoch == p.epoch && s.alg == p.alg) {
		return 0
	}
	w := f.slab.Mut(idx)
	changed, exp := false, int64(0)
	for i, l := range p.limits {
		st := w.stateFor(i, l.WindowMs)
		ns := window.RefundCurrent(p.alg, l, st, now, units)
		if starts != nil {
			ns = window.Refund(p.alg, l, st, now, starts[i], units)
		}
		changed = changed || ns != st
		if i < int(w.n) && w.state(i).windowMs == l.WindowMs {
			w.state(i).s = ns
		}
		exp = max(exp, window.ExpiresAt(p.alg, l, ns))
	}
	if !changed {
		return 0
	}
	w.exp = exp // earlier is fine: alive() reads exp, the heap item frees it later
	return units
}

func (f *FSM) dropGrants(key string, rest []grant) {
	if len(rest) == 0 {
		delete(f.grants, key)
		return
	}
	f.grants[key] = rest
}

// liveStates is the key's state per limit as a hit at now starts from.
func (f *FSM) liveStates(key string, p *tablePolicy, now int64) []window.State {
	out := make([]window.State, len(p.limits))
	if idx, found := f.index[key]; found {
		if s := f.slab.At(idx); s.exp > now && s.epoch == p.epoch && s.alg == p.alg {
			for i, l := range p.limits {
				out[i] = s.stateFor(i, l.WindowMs)
			}
		}
	}
	return out
}

// settle drops the key's grants that ended by now (and any of a dead
// policy incarnation). For a token bucket it first caps the bucket at each
// ended grant's expiry by what was outstanding then, in expiry order (a
// refill the cap held back does not come back when the grant goes), and
// with atNow caps it at now by what is still outstanding, before a
// decision on the key. Every replica settles the same keys at the same
// entries, so the state stays identical.
func (f *FSM) settle(key string, now int64, atNow bool) {
	gs := f.grants[key]
	if len(gs) == 0 {
		return
	}
	p := f.policies[policyOf(key)]
	epoch := f.epochOf(policyOf(key))
	// A mirrored key's bucket is the parent's: its sub-leases end with
	// their slices, and nothing here is capped.
	bucket := p != nil && p.alg == window.TokenBucket && !p.p.Mirrored
	held := int64(0)
	for _, g := range gs {
		if g.epoch == epoch {
			held += g.units
		}
	}
	rest := gs[:0:0]
	for _, g := range gs {
		switch {
		case g.epoch != epoch:
		case g.exp <= now:
			if bucket {
				f.reserve(key, p, g.exp, held)
			}
			held -= g.units
		default:
			rest = append(rest, g)
		}
	}
	if bucket && atNow && held > 0 {
		f.reserve(key, p, now, held)
	}
	if len(rest) != len(gs) {
		f.dropGrants(key, rest)
	}
}

// reserve caps a token bucket key at capacity - held at time t
// (window.Reserve on every limit), writing the key only if that changes it.
func (f *FSM) reserve(key string, p *tablePolicy, t, held int64) {
	idx, found := f.index[key]
	var cur *slot
	if found {
		if s := f.slab.At(idx); s.exp > t && s.epoch == p.epoch && s.alg == p.alg {
			cur = s
		}
	}
	changed := false
	for i, l := range p.limits {
		var st window.State
		if cur != nil {
			st = cur.stateFor(i, l.WindowMs)
		}
		f.next[i] = window.Reserve(p.alg, l, st, t, held)
		changed = changed || f.next[i] != st
	}
	if !changed {
		return
	}
	if !found {
		idx = f.insert(key)
	}
	w := f.slab.Mut(idx)
	w.alg, w.epoch, w.n = p.alg, p.epoch, uint8(len(p.limits))
	if need := len(p.limits) - 1; need > 0 && (w.more == nil || len(*w.more) < need) {
		m := make([]limState, need)
		w.more = &m
	}
	exp := int64(0)
	for i, l := range p.limits {
		*w.state(i) = limState{s: f.next[i], windowMs: l.WindowMs}
		exp = max(exp, window.ExpiresAt(p.alg, l, f.next[i]))
	}
	w.exp = exp
	if !found {
		f.heap.push(exp, idx)
	}
}

// grantDue is an item of the grant expiry heap. Its order is total (at,
// key, index), so which due grants a budget settles is the same on every
// replica, including one that rebuilt its heap from a snapshot.
type grantDue struct {
	at    int64
	key   string
	index uint64
}

type grantHeap []grantDue

func (h grantHeap) Len() int { return len(h) }
func (h grantHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if a.at != b.at {
		return a.at < b.at
	}
	if a.key != b.key {
		return a.key < b.key
	}
	return a.index < b.index
}
func (h grantHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *grantHeap) Push(x any)   { *h = append(*h, x.(grantDue)) }
func (h *grantHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

// expireGrants settles up to budget keys whose grants came due. Items of
// grants already gone (returned, settled on a decision) are skipped
// without counting, so the budget covers the same keys on every replica.
func (f *FSM) expireGrants(now int64, budget int) {
	for budget > 0 && len(f.grantHeap) > 0 && f.grantHeap[0].at <= now {
		it := heap.Pop(&f.grantHeap).(grantDue)
		if !slices.ContainsFunc(f.grants[it.key], func(g grant) bool { return g.index == it.index }) {
			continue
		}
		f.settle(it.key, now, false)
		budget--
	}
}

// rebuildGrantHeap recreates the grant expiry heap after a restore.
func (f *FSM) rebuildGrantHeap() {
	f.grantHeap = f.grantHeap[:0]
	for key, gs := range f.grants {
		for _, g := range gs {
			f.grantHeap = append(f.grantHeap, grantDue{at: g.exp, key: key, index: g.index})
		}
	}
	heap.Init(&f.grantHeap)
}

// GrantView is an outstanding grant as Grants reports it (tests, status).
type GrantView struct {
	Policy, Client, Holder string
	Index                  uint64
	Units, Want, Exp       int64
}

// OutstandingGrants lists the outstanding grants, sorted by key then expiry.
func (f *FSM) OutstandingGrants() []GrantView {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []GrantView
	for _, key := range sortedKeys(f.grants) {
		for _, g := range f.grants[key] {
			if g.exp <= f.lastNow {
				continue
			}
			out = append(out, GrantView{Policy: policyOf(key), Client: key[1+int(key[0]):], Holder: g.holder,
				Index: g.index, Units: g.units, Want: g.want, Exp: g.exp})
		}
	}
	return out
}

// heldAt is what holders still hold of a token-bucket key at now (0 for
// other algorithms, which need no cap).
func (f *FSM) heldAt(key string, p *tablePolicy, now int64) int64 {
	if p.alg != window.TokenBucket {
		return 0
	}
	held := int64(0)
	for _, g := range f.grants[key] {
		if g.exp > now && g.epoch == p.epoch {
			held += g.units
		}
	}
	return held
}
