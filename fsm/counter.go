package fsm

import (
	"encoding/binary"

	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/window"
)

// CounterKind is the sub-kind of a counter-write entry (type 9).
type CounterKind byte

const (
	// CounterSet makes the key's used count N in every limit of its
	// policy, as if N hits had just opened it (0 forgets the key). N must
	// fit every limit; otherwise nothing changes.
	CounterSet CounterKind = 1
	// CounterInc counts N hits without a limit check: the count may pass
	// the limit, and later hits are refused until it drains.
	CounterInc CounterKind = 2
)

// Counter is one admin counter write.
type Counter struct {
	Kind           CounterKind
	Policy, Client string
	N              int64
}

// CounterResult is what Apply returns for a counter write: the key as it
// stands afterwards (Outcome Allowed when the write was made; for a set
// above the limit CostExceedsLimit and nothing changed).
type CounterResult struct {
	Now int64
	Hit HitResult
}

// EncodeCounter encodes a counter write stamped with the leader's now.
//
//	type 9, version 1, kind byte, varint now, policy, client, uvarint n
func EncodeCounter(now int64, c Counter) []byte {
	b := []byte{EntryCounter, codecVersion, byte(c.Kind)}
	b = binary.AppendVarint(b, now)
	b = appendString(b, c.Policy)
	b = appendString(b, c.Client)
	return binary.AppendUvarint(b, uint64(c.N))
}

type counterView struct {
	kind           CounterKind
	now            int64
	policy, client []byte
	n              int64
}

func decodeCounter(buf []byte) (counterView, error) {
	var v counterView
	d, err := header(buf, EntryCounter)
	if err != nil {
		return v, err
	}
	v.kind = CounterKind(d.byte("kind"))
	if d.err == nil && v.kind != CounterSet && v.kind != CounterInc {
		d.fail("counter kind %d unknown", v.kind)
	}
	v.now = d.varint("now")
	v.policy = d.id("policy", MaxPolicyLen)
	v.client = d.id("client", MaxClientLen)
	// set takes 0 (forget the key); inc at least 1.
	n := d.uvarint("n")
	if d.err == nil && (n > MaxLimit+1 || (v.kind == CounterInc && n < 1)) {
		d.fail("n %d out of range for kind %d", n, v.kind)
	}
	v.n = int64(n)
	return v, d.end()
}

// applyCounter writes one key's count through decide, the hit path's own
// state update, with the per-limit step of the counter's kind.
func (f *FSM) applyCounter(l *raft.Log) (any, error) {
	v, err := decodeCounter(l.Data)
	if err != nil {
		return nil, err
	}
	now := f.clock(l.Term, v.now)
	f.last = nil
	res := &CounterResult{Now: now}
	p := f.lookupPolicy(v.policy)
	if p == nil {
		res.Hit.UnknownPolicy = true
		return res, nil
	}
	h := hitView{policy: v.policy, client: v.client, cost: v.n}
	res.Hit.Parts = make([]window.Result, len(p.limits))
	if v.kind == CounterSet && v.n == 0 {
		f.forget(v.policy, v.client)
		for i, lim := range p.limits {
			res.Hit.Parts[i] = window.Peek(p.alg, lim, window.State{}, now)
		}
		res.Hit.Outcome, res.Hit.Counted = window.Allowed, true
		res.Hit.Main = window.MostConstraining(res.Hit.Parts)
		return res, nil
	}
	step := stepSet
	if v.kind == CounterInc {
		step = stepInc
	}
	res.Hit.Counted = f.decide(now, &h, p.alg, p.limits, p.epoch, &res.Hit, false, step)
	return res, nil
}

// forget makes a key decide as never seen from now on (reset-key's rule).
// It reports whether the key had live state.
func (f *FSM) forget(pol, client []byte) bool {
	f.key = appendKey(f.key[:0], pol, client)
	// Its grants go too: units already held may still be spent until
	// their expiry (a reset is an explicit override).
	delete(f.grants, string(f.key))
	// Its reservations' units go with its count: a settle must not refund
	// them from what is counted after the reset (reservation.go).
	f.forgetReserved(string(f.key))
	idx, ok := f.index[string(f.key)]
	if !ok {
		return false
	}
	s := f.slab.Mut(idx)
	found := f.alive(s, f.lastNow)
	// Dead from now on; the expiry heap still holds the slot and frees it.
	s.exp = min(s.exp, f.lastNow)
	s.epoch = ^uint32(0)
	return found
}

// step says how decide moves one limit's state.
type step uint8

const (
	// stepHit is a hit: Apply, refused when there is no room.
	stepHit step = iota
	// stepSet applies the cost to a fresh state: the used count becomes it.
	stepSet
	// stepInc counts the cost whatever the limit (window.Force).
	stepInc
)

// apply moves one limit's state by st and describes the key afterwards.
func (st step) apply(alg window.Algorithm, l window.Limit, s window.State, now, cost int64) (window.Result, window.State) {
	switch st {
	case stepSet:
		return window.Apply(alg, l, window.State{}, now, cost)
	case stepInc:
		ns, ok := window.Force(alg, l, s, now, cost)
		r := window.Peek(alg, l, ns, now)
		if !ok {
			r.Outcome = window.CostExceedsLimit
			return r, s
		}
		r.Outcome = window.Allowed
		return r, ns
	}
	return window.Apply(alg, l, s, now, cost)
}
