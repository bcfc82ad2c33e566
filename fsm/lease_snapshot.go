package fsm

import (
	"encoding/binary"

	"github.com/rlnode/rlnode/lease"
	"github.com/rlnode/rlnode/policy"
)

// appendGrants encodes every grant the map holds (ended ones not yet
// settled too: settling them later caps a token bucket as it would have
// here), sorted by key, in the form snapshots and the digest share:
//
//	uvarint n, n × (key, holder, uvarint index, uvarint units, uvarint want,
//	varint exp, uvarint epoch, uvarint limits, limits × varint window start)
//
// Sub-leases of a region's slices are left out, as the slices are: their
// units were decided from state no snapshot carries, so a replica that
// restored one may hold a different set (sublease.go).
func (f *FSM) appendGrants(b []byte) []byte {
	n := 0
	for _, gs := range f.grants {
		for _, g := range gs {
			if g.from == nil {
				n++
			}
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	for _, key := range sortedKeys(f.grants) {
		for _, g := range f.grants[key] {
			if g.from != nil {
				continue
			}
			b = appendString(b, key)
			b = appendString(b, g.holder)
			b = binary.AppendUvarint(b, g.index)
			b = binary.AppendUvarint(b, uint64(g.units))
			b = binary.AppendUvarint(b, uint64(g.want))
			b = binary.AppendVarint(b, g.exp)
			b = binary.AppendUvarint(b, uint64(g.epoch))
			b = binary.AppendUvarint(b, uint64(len(g.starts)))
			for _, st := range g.starts {
				b = binary.AppendVarint(b, st)
			}
		}
	}
	return b
}

// readGrants reads version 3's outstanding grants.
func (f *FSM) readGrants(r *snapReader) {
	n := r.uvarint("grant count")
	if n > 1<<32 {
		r.fail("%d grants", n)
	}
	for i := uint64(0); r.err == nil && i < n; i++ {
		key := string(r.bytes("grant key", maxKeyLen))
		g := grant{holder: string(r.bytes("grant holder", lease.MaxHolderLen))}
		g.index = r.uvarint("grant index")
		g.units, g.want = int64(r.uvarint("grant units")), int64(r.uvarint("grant want"))
		g.exp = r.varint("grant expiry")
		epoch, limits := r.uvarint("grant epoch"), r.uvarint("grant limits")
		if r.err == nil && (!validKey(key) || g.holder == "" || g.index == 0 || g.units < 1 || g.units > MaxLimit ||
			g.want < 1 || g.want > MaxLimit || epoch > 1<<32-1 || limits > policy.MaxLimits) {
			r.fail("grant %d is malformed", i)
		}
		for j := uint64(0); r.err == nil && j < limits; j++ {
			g.starts = append(g.starts, r.varint("grant window start"))
		}
		if r.err == nil {
			g.epoch = uint32(epoch)
			f.grants[key] = append(f.grants[key], g)
			f.grantsUntil = max(f.grantsUntil, g.exp)
		}
	}
}
