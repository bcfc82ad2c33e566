package fsm

import (
	"encoding/binary"
	"fmt"

	"github.com/rlnode/rlnode/lease"
	"github.com/rlnode/rlnode/policy"
)

// EntrySlices records a region's slices of its parent's global budgets
// (slice.go): parent grants its leader received, the parent's word that
// a window is spent, and slices withdrawn before their units go back up.
// Format R5: the leader writes it only when every voter reads it.
const EntrySlices byte = 21

// SliceKind is what one slice item records.
type SliceKind byte

const (
	// SliceGrant: a parent grant of Units, spendable until UsableMs after
	// the entry's stamp, in the parent's window ending at ResetAt.
	SliceGrant SliceKind = 1
	// SliceDry: the parent granted nothing: the global window has no room
	// for UsableMs from the entry's stamp (hits answer 429 meanwhile).
	SliceDry SliceKind = 2
	// SliceWithdraw: the slice made from parent grant Grant is spent no
	// more; its units left are about to go back up (the apply result says
	// how many).
	SliceWithdraw SliceKind = 3
)

// SliceItem is one item of a slices entry.
type SliceItem struct {
	Kind           SliceKind
	Policy, Client string
	// Grant is the parent's grant id (its log index).
	Grant uint64
	// Units granted (SliceGrant).
	Units int64
	// UsableMs is, from the entry's stamp, how long the slice may be
	// spent (SliceGrant) or the window stays spent (SliceDry).
	UsableMs int64
	// ResetAt, WindowStart and WindowMs describe the parent's window, in
	// the parent's time: answers show them as they are.
	ResetAt, WindowStart, WindowMs int64
}

// Validate checks what the decoder enforces.
func (it SliceItem) Validate() error {
	if err := (Hit{Policy: it.Policy, Client: it.Client, Cost: 1}).Validate(); err != nil {
		return err
	}
	switch it.Kind {
	case SliceGrant, SliceDry, SliceWithdraw:
	default:
		return fmt.Errorf("slice kind %d unknown", it.Kind)
	}
	if it.Units < 0 || it.Units > MaxLimit || it.UsableMs < 0 || it.UsableMs > lease.MaxLeaseMs ||
		it.WindowMs < 0 || it.WindowMs > MaxWindowMs || it.ResetAt < 0 || it.WindowStart < 0 {
		return fmt.Errorf("slice of %s/%s: a number out of range", it.Policy, it.Client)
	}
	return nil
}

// SlicesFormat is the format a slices entry needs on every voter.
const SlicesFormat = FormatR5

// EncodeSlices encodes a slices entry stamped with the leader's now.
//
//	type 21, version 1, varint now, uvarint n, n × (kind byte, policy,
//	client, uvarint grant, uvarint units, uvarint usableMs,
//	uvarint resetAt, uvarint windowStart, uvarint windowMs)
func EncodeSlices(now int64, items []SliceItem) []byte {
	b := []byte{EntrySlices, codecVersion}
	b = binary.AppendVarint(b, now)
	b = binary.AppendUvarint(b, uint64(len(items)))
	for _, it := range items {
		b = append(b, byte(it.Kind))
		b = appendString(b, it.Policy)
		b = appendString(b, it.Client)
		for _, v := range []int64{int64(it.Grant), it.Units, it.UsableMs, it.ResetAt, it.WindowStart, it.WindowMs} {
			b = binary.AppendUvarint(b, uint64(v))
		}
	}
	return b
}

type slicesEntry struct {
	now   int64
	items []SliceItem
}

func decodeSlices(buf []byte) (slicesEntry, error) {
	d, err := header(buf, EntrySlices)
	if err != nil {
		return slicesEntry{}, err
	}
	var e slicesEntry
	e.now = d.leaseNow()
	n := d.itemCount()
	for i := uint64(0); d.err == nil && i < n; i++ {
		it := SliceItem{Kind: SliceKind(d.byte("slice kind"))}
		it.Policy = string(d.id("policy", policy.MaxNameLen))
		it.Client = string(d.id("client", MaxClientLen))
		it.Grant = d.uvarint("grant")
		it.Units, it.UsableMs = int64(d.uvarint("units")), int64(d.uvarint("usableMs"))
		it.ResetAt, it.WindowStart, it.WindowMs = int64(d.uvarint("resetAt")), int64(d.uvarint("windowStart")), int64(d.uvarint("windowMs"))
		if d.err == nil {
			if err := it.Validate(); err != nil {
				d.fail("item %d: %v", i, err)
			}
		}
		e.items = append(e.items, it)
	}
	return e, d.end()
}

// scopeOptions are a policy's scope option bits (format R5).
func scopeOptions(p policy.Policy) uint64 {
	var o uint64
	if p.IsGlobal() {
		o |= optGlobal
	}
	if p.Mirrored {
		o |= optMirrored
	}
	return o
}

// scopeOf reads the scope option bits back.
func scopeOf(opts uint64) (scope string, mirrored bool) {
	if opts&optGlobal != 0 {
		scope = policy.Global
	}
	return scope, opts&optMirrored != 0
}
