package fsm

import (
	"encoding/binary"
	"slices"

	"github.com/rlnode/rlnode/policy"
)

// appendPermits encodes every stored permit (dead ones not yet dropped
// too: dropping them later is the same on every replica), sorted by key,
// then acquire order, in the form snapshots and the digest share:
//
//	uvarint n, n × (key, id, owner, uvarint index, varint exp, uvarint epoch)
func (f *FSM) appendPermits(b []byte) []byte {
	n := 0
	for _, ps := range f.permits {
		n += len(ps)
	}
	b = binary.AppendUvarint(b, uint64(n))
	for _, key := range sortedKeys(f.permits) {
		for _, pm := range f.permits[key] {
			b = appendString(b, key)
			b = appendString(b, pm.id)
			b = appendString(b, pm.owner)
			b = binary.AppendUvarint(b, pm.index)
			b = binary.AppendVarint(b, pm.exp)
			b = binary.AppendUvarint(b, uint64(pm.epoch))
		}
	}
	return b
}

// appendReservations encodes every stored reservation, sorted by id:
//
//	uvarint n, n × (id, owner, uvarint index, varint exp, byte settled,
//	uvarint keys, keys × (key, uvarint units, uvarint epoch,
//	uvarint limits, limits × varint window start))
func (f *FSM) appendReservations(b []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(f.reservations)))
	for _, id := range sortedKeys(f.reservations) {
		r := f.reservations[id]
		b = appendString(b, id)
		b = appendString(b, r.owner)
		b = binary.AppendUvarint(b, r.index)
		b = binary.AppendVarint(b, r.exp)
		if r.settled {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
		b = binary.AppendUvarint(b, uint64(len(r.items)))
		for _, it := range r.items {
			b = appendString(b, it.key)
			b = binary.AppendUvarint(b, uint64(it.units))
			b = binary.AppendUvarint(b, uint64(it.epoch))
			b = binary.AppendUvarint(b, uint64(len(it.starts)))
			for _, st := range it.starts {
				b = binary.AppendVarint(b, st)
			}
		}
	}
	return b
}

// readPermits reads version 4's permits.
func (f *FSM) readPermits(r *snapReader) {
	n := r.uvarint("permit count")
	if n > 1<<32 {
		r.fail("%d permits", n)
	}
	for i := uint64(0); r.err == nil && i < n; i++ {
		key := string(r.bytes("permit key", maxKeyLen))
		pm := permit{id: string(r.bytes("permit id", IDLen))}
		pm.owner = string(r.bytes("permit owner", MaxOwnerLen))
		pm.index = r.uvarint("permit index")
		pm.exp = r.varint("permit expiry")
		epoch := r.uvarint("permit epoch")
		if r.err != nil {
			break
		}
		_, dup := f.permitKey[pm.id]
		ps := f.permits[key]
		if !validKey(key) || ValidateID(pm.id) != nil || dup || pm.index == 0 || epoch > 1<<32-1 ||
			len(ps) > 0 && ps[len(ps)-1].index >= pm.index {
			r.fail("permit %d is malformed", i)
			break
		}
		pm.epoch = uint32(epoch)
		f.permits[key] = append(ps, pm)
		f.permitKey[pm.id] = key
	}
}

// readReservations reads version 4's reservations.
func (f *FSM) readReservations(r *snapReader) {
	n := r.uvarint("reservation count")
	if n > 1<<32 {
		r.fail("%d reservations", n)
	}
	for i := uint64(0); r.err == nil && i < n; i++ {
		rv := &reservation{id: string(r.bytes("reservation id", IDLen))}
		rv.owner = string(r.bytes("reservation owner", MaxOwnerLen))
		rv.index = r.uvarint("reservation index")
		rv.exp = r.varint("reservation expiry")
		settled := r.byte("reservation settled")
		keys := r.uvarint("reservation keys")
		if r.err == nil && (ValidateID(rv.id) != nil || f.reservations[rv.id] != nil || settled > 1 ||
			keys == 0 || keys > MaxReservationItems) {
			r.fail("reservation %d is malformed", i)
		}
		rv.settled = settled == 1
		for j := uint64(0); r.err == nil && j < keys; j++ {
			it := reserved{key: string(r.bytes("reservation key", maxKeyLen))}
			it.units = int64(r.uvarint("reservation units"))
			epoch, limits := r.uvarint("reservation epoch"), r.uvarint("reservation limits")
			if r.err == nil && (!validKey(it.key) || it.units < 1 || it.units > MaxLimit || epoch > 1<<32-1 || limits > policy.MaxLimits) {
				r.fail("reservation %d is malformed", i)
			}
			for k := uint64(0); r.err == nil && k < limits; k++ {
				it.starts = append(it.starts, r.varint("reservation window start"))
			}
			it.epoch = uint32(epoch)
			rv.items = append(rv.items, it)
		}
		if r.err == nil {
			f.reservations[rv.id] = rv
		}
	}
}

// hasPermitState reports whether a snapshot needs version 4: without
// permits or reservations it is written as version 3, which a node of the
// previous release (a follower during a rolling upgrade) can restore.
func (s *fsmSnapshot) hasPermitState() bool {
	return !slices.Equal(s.permits, emptySection) || !slices.Equal(s.reservations, emptySection)
}

// emptySection is an encoded section of no items.
var emptySection = []byte{0}
