package fsm

import (
	"container/heap"
	"fmt"
	"math"
	"slices"

	"github.com/hashicorp/raft"
)

// permit is one live concurrency permit of a key: held by owner until exp
// (FSM time) or its release. index is the log index of the entry that
// acquired it (the key's permits are kept in index order, oldest first).
type permit struct {
	id    string
	owner string
	index uint64
	exp   int64
	epoch uint32
	// due is the permit's item in the expiry heap.
	due *permitDue
}

// PermitResult is what Apply returns for a permit entry.
type PermitResult struct {
	Now int64
	// UnknownPolicy: no such policy. NotConcurrency: the policy counts
	// hits, not permits. NotFound: the id names no live permit of this
	// owner (release, renew), or the key has none (release-oldest).
	UnknownPolicy, NotConcurrency, NotFound bool
	// Acquired: the acquire got a permit (else the key was full, or the
	// state machine was: Full).
	Acquired bool
	// Full: the state machine holds MaxPermits permits already, expired
	// ones dropped first; nothing was taken.
	Full bool
	// ID and Exp describe the permit acquired, renewed or released.
	ID  string
	Exp int64
	// Policy and Client name the key (release and renew report it too).
	Policy, Client string
	// Live is how many permits of the key are live after the entry, Limit
	// the policy's limit (0 when the policy is gone).
	Live, Limit int64
	// RetryAt is, for a refused acquire, when the earliest live permit of
	// the key expires.
	RetryAt int64
}

// MaxPermits bounds the permits the state holds across every key: the
// per-key limit (a policy's limit, up to 100,000) and the TTL (up to 1 h) alone let
// a caller spreading acquires over many client keys grow it without
// bound. A permit of a deleted or changed policy counts until its TTL
// ends or its key is next touched, as a settled reservation counts
// against MaxReservations until its TTL.
const MaxPermits = 1 << 20

func (f *FSM) applyPermit(l *raft.Log) any {
	e, err := decodePermit(l.Data)
	if err != nil {
		return f.halt(fmt.Errorf("index %d: %w", l.Index, err))
	}
	now := f.leaseClock(l.Term, e.Now)
	switch e.Op {
	case PermitAcquire:
		return f.acquirePermit(now, l.Index, e)
	case PermitRelease, PermitRenew:
		return f.releaseOrRenew(now, e)
	default:
		return f.releaseOldest(now, e)
	}
}

func (f *FSM) acquirePermit(now int64, index uint64, e PermitEntry) *PermitResult {
	res := &PermitResult{Now: now, Policy: e.Policy, Client: e.Client, ID: e.ID}
	p := f.policies[e.Policy]
	switch {
	case p == nil:
		res.UnknownPolicy = true
		return res
	case !p.p.IsConcurrency():
		res.NotConcurrency = true
		return res
	}
	key := string(appendKey(nil, []byte(e.Policy), []byte(e.Client)))
	live := f.livePermits(key, now)
	res.Limit = p.limits[0].Limit
	res.Live = int64(len(live))
	if _, dup := f.permitKey[e.ID]; dup || res.Live >= res.Limit {
		// A repeated id is a leader bug (ids are random); refusing keeps
		// every id naming one permit.
		res.RetryAt = now
		for _, pm := range live {
			if res.RetryAt == now || pm.exp < res.RetryAt {
				res.RetryAt = pm.exp
			}
		}
		return res
	}
	if f.permitsFull(now) {
		res.Full = true
		return res
	}
	pm := permit{id: e.ID, owner: e.Owner, index: index, exp: now + e.TTLMs, epoch: p.epoch}
	pm.due = &permitDue{at: pm.exp, key: key, index: index}
	heap.Push(&f.permitHeap, pm.due)
	f.permits[key] = append(live, pm) // index order: index grows with the log
	f.permitKey[e.ID] = key
	f.counts.countPermit(key, pm, 1)
	res.Acquired, res.Exp, res.Live = true, pm.exp, res.Live+1
	return res
}

// permitsFull reports whether the state holds maxPermits permits, after
// dropping every one whose expiry came due (not only the per-entry
// budget's): expired permits never count against the bound. The drop
// depends only on the state and now, so every replica refuses the same
// entry; each heap item is popped once, so a caller retrying at the bound
// does not redo the work.
func (f *FSM) permitsFull(now int64) bool {
	if len(f.permitKey) < f.maxPermits {
		return false
	}
	f.expirePermits(now, math.MaxInt)
	return len(f.permitKey) >= f.maxPermits
}

// livePermits drops the key's dead permits (expired by now, or of a dead
// policy incarnation) and returns the live ones, oldest first.
func (f *FSM) livePermits(key string, now int64) []permit {
	ps := f.permits[key]
	epoch, ok := f.permitEpoch(key)
	rest := ps[:0]
	for _, pm := range ps {
		if ok && pm.exp > now && pm.epoch == epoch {
			rest = append(rest, pm)
		} else {
			delete(f.permitKey, pm.id)
			f.unschedule(pm)
			f.counts.countPermit(key, pm, -1)
		}
	}
	clear(ps[len(rest):])
	if len(rest) == 0 {
		delete(f.permits, key)
		return nil
	}
	f.permits[key] = rest
	return rest
}

// permitEpoch is the incarnation a key's permits must have to be live;
// false when the policy is gone or no longer counts permits.
func (f *FSM) permitEpoch(key string) (uint32, bool) {
	p := f.policies[policyOf(key)]
	if p == nil || !p.p.IsConcurrency() {
		return 0, false
	}
	return p.epoch, true
}

func (f *FSM) releaseOrRenew(now int64, e PermitEntry) *PermitResult {
	res := &PermitResult{Now: now, ID: e.ID}
	key, ok := f.permitKey[e.ID]
	if !ok {
		res.NotFound = true
		return res
	}
	live := f.livePermits(key, now)
	res.Policy, res.Client = policyOf(key), key[1+int(key[0]):]
	j := slices.IndexFunc(live, func(pm permit) bool { return pm.id == e.ID && pm.owner == e.Owner })
	if p := f.policies[res.Policy]; p != nil && p.p.IsConcurrency() {
		res.Limit = p.limits[0].Limit
	}
	if j < 0 {
		res.NotFound, res.Live = true, int64(len(live))
		return res
	}
	if e.Op == PermitRenew {
		pm := &live[j]
		pm.exp = max(pm.exp, now+e.TTLMs)
		if pm.due.at != pm.exp { // the permit's one heap item moves with it
			pm.due.at = pm.exp
			heap.Fix(&f.permitHeap, pm.due.pos)
		}
		res.Exp, res.Live = pm.exp, int64(len(live))
		return res
	}
	res.Exp = live[j].exp
	f.dropPermit(key, live, j)
	res.Live = int64(len(live) - 1)
	return res
}

func (f *FSM) releaseOldest(now int64, e PermitEntry) *PermitResult {
	res := &PermitResult{Now: now, Policy: e.Policy, Client: e.Client}
	key := string(appendKey(nil, []byte(e.Policy), []byte(e.Client)))
	live := f.livePermits(key, now)
	if p := f.policies[e.Policy]; p != nil && p.p.IsConcurrency() {
		res.Limit = p.limits[0].Limit
	}
	if len(live) == 0 {
		res.NotFound = true
		return res
	}
	res.ID, res.Exp = live[0].id, live[0].exp
	f.dropPermit(key, live, 0)
	res.Live = int64(len(live) - 1)
	return res
}

func (f *FSM) dropPermit(key string, live []permit, j int) {
	delete(f.permitKey, live[j].id)
	f.unschedule(live[j])
	f.counts.countPermit(key, live[j], -1)
	rest := slices.Delete(live, j, j+1)
	if len(rest) == 0 {
		delete(f.permits, key)
		return
	}
	f.permits[key] = rest
}

// expirePermits drops up to budget keys' dead permits whose expiry came
// due. Every heap item is a stored permit's (release and renew move or
// remove theirs), so the budget covers the same keys on every replica, as
// the skipped stale items of earlier releases did.
func (f *FSM) expirePermits(now int64, budget int) {
	for budget > 0 && len(f.permitHeap) > 0 && f.permitHeap[0].at <= now {
		it := heap.Pop(&f.permitHeap).(*permitDue)
		if !slices.ContainsFunc(f.permits[it.key], func(pm permit) bool { return pm.index == it.index && pm.exp == it.at }) {
			continue
		}
		f.livePermits(it.key, now)
		budget--
	}
}

// rebuildPermitIndex recreates the id index and the expiry heap after a
// restore.
func (f *FSM) rebuildPermitIndex() {
	f.permitHeap = f.permitHeap[:0]
	for key, ps := range f.permits {
		for i := range ps {
			f.permitKey[ps[i].id] = key
			ps[i].due = &permitDue{at: ps[i].exp, key: key, index: ps[i].index, pos: len(f.permitHeap)}
			f.permitHeap = append(f.permitHeap, ps[i].due)
		}
	}
	heap.Init(&f.permitHeap)
}

// PermitView is a stored permit as Permits reports it (tests, status).
type PermitView struct {
	Policy, Client, ID, Owner string
	Index                     uint64
	Exp                       int64
}

// LivePermits lists the permits live at the last applied time, by key then
// acquire order.
func (f *FSM) LivePermits() []PermitView {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []PermitView
	for _, key := range sortedKeys(f.permits) {
		epoch, ok := f.permitEpoch(key)
		for _, pm := range f.permits[key] {
			if ok && pm.exp > f.lastNow && pm.epoch == epoch {
				out = append(out, PermitView{Policy: policyOf(key), Client: key[1+int(key[0]):], ID: pm.id,
					Owner: pm.owner, Index: pm.index, Exp: pm.exp})
			}
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
