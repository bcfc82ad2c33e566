package fsm

import (
	"container/heap"
	"fmt"
	"slices"

	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/window"
)

// reservation is units charged up front to one or more keys, settled later
// at the real cost. A settled one stays, as a tombstone, until exp.
type reservation struct {
	id, owner string
	index     uint64
	exp       int64
	settled   bool
	items     []reserved
}

// reserved is one key's part of a reservation: units counted, per limit
// in the window starting at starts[i] of the policy incarnation epoch.
type reserved struct {
	key    string
	units  int64
	epoch  uint32
	starts []int64
}

// ReservationResult is what Apply returns for a reservation entry.
type ReservationResult struct {
	Now int64
	// Reserve: Reserved when every key had room (all were charged),
	// else nothing was. Refusal names the first item that cannot be
	// reserved at all (unknown policy, a concurrency or leased one) as
	// Item with Reason; Hits holds each key's decision otherwise.
	Reserved bool
	Item     int
	Reason   string
	// Full: the state machine holds MaxReservations already (settled ones
	// until their TTL too); nothing was charged.
	Full bool
	Hits []HitResult
	// Exp: when an unsettled reservation is dropped (it stays charged).
	Exp int64
	// Settle: NotFound (no such live reservation of this owner), or
	// AlreadySettled; else per key the units reserved (Units), Refunded (U - actual, given
	// back to the window it was charged to; 0 when that window ended)
	// and Charged (actual - U, counted in the current window whatever
	// the limit), and Overdraft, the part of the charge no limit had room
	// for (reported, not refused: the work is done).
	NotFound, AlreadySettled bool
	Units, Refunded, Charged []int64
	Overdraft                int64
}

// MaxReservations bounds the reservations the state holds, settled ones
// included until their TTL (a second settle is told apart from an unknown
// id): a caller reserving and settling in a loop cannot grow it without
// bound.
const MaxReservations = 1 << 20

// Refusal reasons of a reserve.
const (
	ReasonUnknownPolicy = "unknown policy"
	ReasonConcurrency   = "a concurrency policy counts permits, not units"
	ReasonLeased        = "a leased policy cannot be reserved from"
	// A shadow policy never refuses, so a reservation's all-or-nothing
	// charge (and the settle that gives back part of it) has no meaning.
	ReasonShadow = "a shadow policy cannot be reserved from"
)

func (f *FSM) applyReservation(l *raft.Log) any {
	e, err := decodeReservation(l.Data)
	if err != nil {
		return f.halt(fmt.Errorf("index %d: %w", l.Index, err))
	}
	now := f.leaseClock(l.Term, e.Now)
	f.expireReservations(now, f.cfg.ExpireBudget)
	if e.Op == ReservationReserve {
		return f.reserveUnits(now, l.Index, e)
	}
	return f.settleReservation(now, e)
}

func (f *FSM) reserveUnits(now int64, index uint64, e ReservationEntry) *ReservationResult {
	res := &ReservationResult{Now: now, Item: -1}
	nparts := 0
	for i, it := range e.Items {
		p := f.policies[it.Policy]
		switch {
		case p == nil:
			res.Reason = ReasonUnknownPolicy
		case p.p.IsConcurrency():
			res.Reason = ReasonConcurrency
		case p.p.IsLeased():
			res.Reason = ReasonLeased
		case p.p.IsShadow():
			res.Reason = ReasonShadow
		default:
			nparts += len(p.limits)
			continue
		}
		res.Item = i
		return res
	}
	if len(f.reservations) >= MaxReservations {
		res.Full = true
		return res
	}
	if _, dup := f.reservations[e.ID]; dup {
		res.Reason = "the id is in use" // a leader bug: ids are random
		return res
	}
	views := make([]hitView, len(e.Items))
	for i, it := range e.Items {
		views[i] = hitView{policy: []byte(it.Policy), client: []byte(it.Client), cost: it.Units, group: len(e.Items)}
	}
	res.Hits = make([]HitResult, len(views))
	f.last = nil
	f.applyGroup(now, views, res.Hits, make([]window.Result, nparts))
	if !res.Hits[0].Counted {
		return res
	}
	r := &reservation{id: e.ID, owner: e.Owner, index: index, exp: now + e.TTLMs}
	for i, it := range e.Items {
		p := f.policies[it.Policy]
		rv := reserved{key: string(appendKey(nil, []byte(it.Policy), []byte(it.Client))), units: it.Units, epoch: p.epoch}
		for _, part := range res.Hits[i].Parts {
			rv.starts = append(rv.starts, part.WindowStart)
		}
		r.items = append(r.items, rv)
	}
	f.reservations[e.ID] = r
	f.counts.countReservation(r, 1)
	heap.Push(&f.reservationHeap, grantDue{at: r.exp, key: e.ID, index: index})
	res.Reserved, res.Exp = true, r.exp
	return res
}

func (f *FSM) settleReservation(now int64, e ReservationEntry) *ReservationResult {
	res := &ReservationResult{Now: now, Item: -1}
	r := f.reservations[e.ID]
	switch {
	case r == nil || r.owner != e.Owner || r.exp <= now:
		res.NotFound = true
		return res
	case r.settled:
		res.AlreadySettled = true
		return res
	}
	r.settled = true
	res.Exp = r.exp
	res.Units, res.Refunded, res.Charged = make([]int64, len(r.items)), make([]int64, len(r.items)), make([]int64, len(r.items))
	for i, it := range r.items {
		res.Units[i] = it.units
		p := f.policies[policyOf(it.key)]
		if p == nil || p.epoch != it.epoch || len(p.limits) != len(it.starts) {
			continue // the policy was deleted or reshaped, or the key reset: nothing to settle against
		}
		switch {
		case e.Units < it.units:
			res.Refunded[i] = f.refund(now, it.key, p, it.units-e.Units, it.starts)
		case e.Units > it.units:
			extra := e.Units - it.units
			room := extra
			for k, st := range f.liveStates(it.key, p, now) {
				room = min(room, window.Room(p.alg, p.limits[k], st, now))
			}
			room = max(room, 0)
			charge := extra
			if e.Op == ReservationSettleBounded {
				charge = room // never past the limit: the rest is overdraft, not charged
			}
			if charge == 0 {
				res.Overdraft = max(res.Overdraft, extra)
				continue
			}
			client := it.key[1+int(it.key[0]):]
			hv := hitView{policy: []byte(policyOf(it.key)), client: []byte(client), cost: charge}
			hr := HitResult{Parts: make([]window.Result, len(p.limits))}
			if f.decide(now, &hv, p.alg, p.limits, p.epoch, &hr, false, stepInc) {
				res.Charged[i] = charge
				res.Overdraft = max(res.Overdraft, extra-room)
			}
		}
	}
	return res
}

// expireReservations drops up to budget reservations whose TTL ended:
// unsettled ones stay charged (their units are simply never given back).
func (f *FSM) expireReservations(now int64, budget int) {
	for budget > 0 && len(f.reservationHeap) > 0 && f.reservationHeap[0].at <= now {
		it := heap.Pop(&f.reservationHeap).(grantDue)
		if r := f.reservations[it.key]; r != nil && r.exp <= now {
			delete(f.reservations, it.key)
			f.counts.countReservation(r, -1)
			budget--
		}
	}
}

// resetEpoch is the epoch of a reserved item whose key was reset after
// the reserve (no policy incarnation has it): the reset forgot the units
// it counted, and aligned windows (and a token bucket, which has no
// start) reopen where a refund by window start would take them off hits
// counted after the reset. Such an item settles to nothing, as a reset
// key's grants return nothing.
const resetEpoch = ^uint32(0)

// forgetReserved marks the reserved items of key as reset.
func (f *FSM) forgetReserved(key string) {
	f.markReserved(func(k string) bool { return k == key })
}

// forgetReservedOf marks the reserved items of every key of the policy
// as reset: the policy changed its algorithm or a window length in place,
// so its keys' states start afresh (a state of another algorithm or
// window length is not read), and aligned windows may reopen at the
// starts the items hold. Only reservations change, which exist only once
// every voter runs FormatR4: replicas of the previous release, which
// apply the same policy entry, hold none.
func (f *FSM) forgetReservedOf(policyName string) {
	f.markReserved(func(k string) bool { return policyOf(k) == policyName })
}

// markReserved marks the reserved items whose key matches as reset. Every
// item is marked whatever the map's order, so replicas stay identical.
func (f *FSM) markReserved(match func(key string) bool) {
	for _, r := range f.reservations {
		for i := range r.items {
			if match(r.items[i].key) {
				r.items[i].epoch = resetEpoch
			}
		}
	}
}

// sameShape reports whether a policy changed in place keeps its keys'
// states: the same algorithm and the same window length per limit.
func sameShape(a, b *tablePolicy) bool {
	return a.alg == b.alg && slices.EqualFunc(a.limits, b.limits, func(x, y window.Limit) bool { return x.WindowMs == y.WindowMs })
}

func (f *FSM) rebuildReservationHeap() {
	f.reservationHeap = f.reservationHeap[:0]
	for id, r := range f.reservations {
		f.reservationHeap = append(f.reservationHeap, grantDue{at: r.exp, key: id, index: r.index})
	}
	heap.Init(&f.reservationHeap)
}

// ReservationView is a stored reservation as Reservations reports it.
type ReservationView struct {
	ID, Owner string
	Exp       int64
	Settled   bool
	Keys      []ReserveItem
}

// Reservations lists the stored reservations not yet expired, by id.
func (f *FSM) Reservations() []ReservationView {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []ReservationView
	for _, id := range sortedKeys(f.reservations) {
		r := f.reservations[id]
		if r.exp <= f.lastNow {
			continue
		}
		v := ReservationView{ID: id, Owner: r.owner, Exp: r.exp, Settled: r.settled}
		for _, it := range r.items {
			v.Keys = append(v.Keys, ReserveItem{Policy: policyOf(it.key), Client: it.key[1+int(it.key[0]):], Units: it.units})
		}
		out = append(out, v)
	}
	return out
}
