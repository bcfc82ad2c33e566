package fsm

import (
	"encoding/binary"
	"hash/fnv"
	"io"
	"slices"

	"github.com/rlnode/rlnode/policy"
	"github.com/rlnode/rlnode/window"
)

// KeyView is one key as a peek sees it: the policy and, per limit in the
// policy's order, the state a hit at the applied time would start from.
type KeyView struct {
	Policy policy.Policy
	// Stored: the key has live state (otherwise States are all zero, a
	// never-seen key).
	Stored       bool
	States       []window.State
	AppliedNow   int64
	AppliedIndex uint64
}

// Lookup returns the state of (policy, client) at the applied time and
// index it was read at. ok is false when the policy is not in the table.
func (f *FSM) Lookup(policyName, client string) (v KeyView, ok bool) {
	key := appendKey(make([]byte, 0, 1+len(policyName)+len(client)), []byte(policyName), []byte(client))
	f.mu.RLock()
	defer f.mu.RUnlock()
	v.AppliedNow, v.AppliedIndex = f.lastNow, f.appliedIndex
	p := f.policies[policyName]
	if p == nil {
		return v, false
	}
	v.Policy = p.p
	v.States = make([]window.State, len(p.limits))
	if idx, found := f.index[string(key)]; found {
		if s := f.slab.At(idx); f.alive(s, f.lastNow) && s.alg == p.alg {
			v.Stored = true
			for i, l := range p.limits {
				v.States[i] = s.stateFor(i, l.WindowMs)
			}
		}
	}
	if held := f.heldAt(string(key), p, f.lastNow); held > 0 {
		// The bucket as the next decision sees it: capped by what holders hold.
		for i, l := range p.limits {
			v.States[i] = window.Reserve(p.alg, l, v.States[i], f.lastNow, held)
		}
	}
	return v, true
}

// Digest summarizes the replicated state at the applied index it returns.
// Two replicas at the same index must report the same digest. Dead keys
// are left out, so how far lazy expiry has got does not matter.
func (f *FSM) Digest() (digest uint64, appliedIndex uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var sum uint64
	var buf []byte
	for i := range f.slab.Len() {
		s := f.slab.At(uint32(i))
		if !f.alive(s, f.lastNow) {
			continue
		}
		buf = appendSlot(buf[:0], s)
		sum += hash64(buf) // order-independent: slab order differs between replicas
	}
	h := fnv.New64a()
	binary.Write(h, binary.BigEndian, sum)
	binary.Write(h, binary.BigEndian, f.lastNow)
	binary.Write(h, binary.BigEndian, f.nextEpoch)
	binary.Write(h, binary.BigEndian, f.seeded)
	for _, p := range f.sortedPolicies() {
		h.Write(appendPolicy(nil, p))
	}
	h.Write(f.appendGrants(nil))
	if len(f.permits) > 0 || len(f.reservations) > 0 {
		// Absent, the digest is the previous release's, so mixed
		// versions compare equal until permits are used.
		h.Write(f.appendPermits(nil))
		h.Write(f.appendReservations(nil))
	}
	ids := make([]string, 0, len(f.nodes))
	for id := range f.nodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		n := f.nodes[id]
		io.WriteString(h, n.ID+"\x00"+n.RaftAddr+"\x00"+n.HTTPAddr+"\x00")
	}
	return h.Sum64(), f.appliedIndex
}

func (f *FSM) sortedPolicies() []*tablePolicy {
	out := make([]*tablePolicy, 0, len(f.policies))
	for _, p := range f.policies {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *tablePolicy) int { return cmpStr(a.p.Name, b.p.Name) })
	return out
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// appendSlot encodes a key's state as snapshots and digests see it.
func appendSlot(buf []byte, s *slot) []byte {
	buf = appendString(buf, s.key)
	buf = binary.AppendVarint(buf, s.exp)
	buf = binary.AppendUvarint(buf, uint64(s.epoch))
	buf = append(buf, byte(s.alg), s.n)
	for i := range int(s.n) {
		st := s.state(i)
		buf = binary.AppendUvarint(buf, uint64(st.windowMs))
		buf = binary.AppendVarint(buf, st.s.A)
		buf = binary.AppendVarint(buf, st.s.B)
		buf = binary.AppendVarint(buf, st.s.C)
	}
	return buf
}

// appendPolicy encodes a table entry as snapshots and digests see it.
func appendPolicy(buf []byte, p *tablePolicy) []byte {
	buf = binary.AppendUvarint(buf, uint64(p.epoch))
	return appendPolicyBody(buf, p.p)
}

// hash64 is FNV-1a, written out so the per-key loop of Digest does not
// allocate a hasher per key.
func hash64(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}
