package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/rlnode/rlnode/lease"
	"github.com/rlnode/rlnode/window"
)

// EntryCalls is a batch of per-call items (gubernator's V1 API): each
// brings its own limit and is decided on its own. It needs FormatR5 on
// every voter (fsm/DESIGN.md, "Per-call limits").
const EntryCalls byte = 20

// Bounds of per-call items.
const (
	// MaxCallNameLen bounds an item's name (gubernator's namespace): a
	// key's policy part is a marker byte and the name, at most
	// MaxPolicyLen bytes.
	MaxCallNameLen = MaxPolicyLen - 1
	// MaxCallsPerEntry is gubernator's batch size.
	MaxCallsPerEntry = 1000
	// MaxCallKeys bounds the per-call keys a bound in an entry may allow.
	MaxCallKeys = 1 << 24
)

// Call item flags (gubernator's behaviours that change a decision).
const (
	CallGregorian byte = 1 << iota
	CallResetRemaining
	CallDrainOverLimit
	// CallGrant and CallReturn make an item a lease operation on the key
	// (GLOBAL items, call_lease.go), not a hit: a grant to a holder, or a
	// return of a grant's units. Unknown to no released format: format 5
	// is unreleased, and a release before it cannot apply a calls entry.
	CallGrant
	CallReturn
	callFlags = CallGregorian | CallResetRemaining | CallDrainOverLimit | CallGrant | CallReturn
)

// CallLease is an item's lease operation (GLOBAL items: node leases on
// per-call keys, fsm/DESIGN.md "Per-call limits"). Grant: lend Holder up
// to Want units for LeaseMs. Return: give back Units of the grant made
// at Index (0 releases it).
type CallLease struct {
	Grant, Return bool
	Holder        string
	Want, LeaseMs int64
	Index         uint64
	Units         int64
}

// CallItem is one per-call item: Name and Key name the state (gubernator's
// name and unique_key), the rest is the call.
type CallItem struct {
	Name, Key string
	Call      window.Call
	// Lease: nothing for a hit; a grant or a return (GLOBAL items).
	Lease CallLease
}

// CallsEntry is a batch of items, stamped by the leader. Owner is the
// caller's credential identity; MaxKeys and MaxKeysPerOwner are the
// leader's bounds on stored per-call keys (node-wide and per owner): every
// replica refuses the same new keys because the bounds travel with the
// entry.
type CallsEntry struct {
	Now                      int64
	Owner                    string
	MaxKeys, MaxKeysPerOwner int64
	Items                    []CallItem
}

// ValidateCallItem checks an item's name and key, and its call.
func ValidateCallItem(it CallItem) error {
	if err := validID("name", it.Name, MaxCallNameLen); err != nil {
		return err
	}
	if err := ValidateClient(it.Key); err != nil {
		return fmt.Errorf("unique_key: %w", err)
	}
	if err := it.Call.Validate(); err != nil {
		return err
	}
	return it.Lease.validate(it.Call)
}

// validate checks a lease operation: one kind at most, a valid holder,
// and a call that is not itself a hit (hits 0, no behaviour that changes
// the key): a lease item never changes a key's parameters.
func (l CallLease) validate(c window.Call) error {
	switch {
	case !l.Grant && !l.Return:
		if l != (CallLease{}) {
			return fmt.Errorf("lease fields on an item that is not a lease operation")
		}
		return nil
	case l.Grant && l.Return:
		return fmt.Errorf("an item is a grant or a return, not both")
	case c.Alg != window.CallTokenBucket:
		return fmt.Errorf("only token-bucket keys are leased")
	case c.Hits != 0 || c.ResetRemaining || c.DrainOverLimit:
		return fmt.Errorf("a lease item carries no hits and no behaviour that changes the key")
	}
	if err := ValidateHolder(l.Holder); err != nil {
		return err
	}
	if l.Grant && (l.Want < 1 || l.Want > window.MaxCallLimit || l.LeaseMs < 1 || l.LeaseMs > lease.MaxLeaseMs || l.Index != 0 || l.Units != 0) {
		return fmt.Errorf("grant: want %d (1 to 2^40), lease %d ms (1 to %d)", l.Want, l.LeaseMs, lease.MaxLeaseMs)
	}
	if l.Return && (l.Index < 1 || l.Units < 0 || l.Units > window.MaxCallLimit || l.Want != 0 || l.LeaseMs != 0) {
		return fmt.Errorf("return: grant index %d (at least 1), units %d (0 to 2^40)", l.Index, l.Units)
	}
	return nil
}

// Validate checks what Apply relies on.
func (e CallsEntry) Validate() error {
	switch {
	case e.Now <= 0:
		return fmt.Errorf("now %d is not a Unix time", e.Now)
	case len(e.Owner) > MaxOwnerLen:
		return fmt.Errorf("owner is %d bytes, longer than %d", len(e.Owner), MaxOwnerLen)
	case len(e.Items) < 1 || len(e.Items) > MaxCallsPerEntry:
		return fmt.Errorf("%d items, want 1 to %d", len(e.Items), MaxCallsPerEntry)
	case e.MaxKeys < 1 || e.MaxKeys > MaxCallKeys || e.MaxKeysPerOwner < 1 || e.MaxKeysPerOwner > e.MaxKeys:
		return fmt.Errorf("key bounds %d per owner, %d in all: want 1 <= per owner <= all <= %d", e.MaxKeysPerOwner, e.MaxKeys, MaxCallKeys)
	}
	var errs []error
	for i, it := range e.Items {
		if err := ValidateCallItem(it); err != nil {
			errs = append(errs, fmt.Errorf("items[%d]: %w", i, err))
		}
	}
	return errors.Join(errs...)
}

// EncodeCalls encodes e: varint now, owner, uvarint bounds (all, per
// owner), uvarint n, n × (name, key, algorithm byte, flags byte, uvarint
// hits, limit, duration, burst; with CallGrant: holder, uvarint want,
// lease ms; with CallReturn: holder, uvarint grant index, units).
func EncodeCalls(e CallsEntry) []byte {
	b := []byte{EntryCalls, codecVersion}
	b = binary.AppendVarint(b, e.Now)
	b = appendString(b, e.Owner)
	b = binary.AppendUvarint(b, uint64(e.MaxKeys))
	b = binary.AppendUvarint(b, uint64(e.MaxKeysPerOwner))
	b = binary.AppendUvarint(b, uint64(len(e.Items)))
	for _, it := range e.Items {
		b = appendString(b, it.Name)
		b = appendString(b, it.Key)
		c := it.Call
		var flags byte
		l := it.Lease
		for _, f := range []struct {
			on  bool
			bit byte
		}{{c.Gregorian, CallGregorian}, {c.ResetRemaining, CallResetRemaining}, {c.DrainOverLimit, CallDrainOverLimit},
			{l.Grant, CallGrant}, {l.Return, CallReturn}} {
			if f.on {
				flags |= f.bit
			}
		}
		b = append(b, byte(c.Alg), flags)
		for _, v := range []int64{c.Hits, c.Limit, c.Duration, c.Burst} {
			b = binary.AppendUvarint(b, uint64(v))
		}
		switch {
		case l.Grant:
			b = appendString(b, l.Holder)
			b = binary.AppendUvarint(b, uint64(l.Want))
			b = binary.AppendUvarint(b, uint64(l.LeaseMs))
		case l.Return:
			b = appendString(b, l.Holder)
			b = binary.AppendUvarint(b, l.Index)
			b = binary.AppendUvarint(b, uint64(l.Units))
		}
	}
	return b
}

// decodeCalls decodes and validates a calls entry.
func decodeCalls(buf []byte) (CallsEntry, error) {
	d, err := header(buf, EntryCalls)
	if err != nil {
		return CallsEntry{}, err
	}
	e := CallsEntry{Now: d.varint("now")}
	e.Owner = string(d.bytes("owner", MaxOwnerLen))
	e.MaxKeys = int64(min(d.uvarint("key bound"), MaxCallKeys+1))
	e.MaxKeysPerOwner = int64(min(d.uvarint("owner key bound"), MaxCallKeys+1))
	n := d.uvarint("item count")
	if d.err == nil && (n < 1 || n > MaxCallsPerEntry) {
		d.fail("item count %d out of range", n)
	}
	for i := uint64(0); d.err == nil && i < n; i++ {
		it := CallItem{Name: string(d.bytes("name", MaxCallNameLen)), Key: string(d.bytes("unique_key", MaxClientLen))}
		alg, flags := d.byte("algorithm"), d.byte("flags")
		if d.err == nil && flags&^callFlags != 0 {
			d.fail("unknown item flags %#x", flags)
		}
		var v [4]int64
		for j := range v {
			v[j] = int64(min(d.uvarint("number"), uint64(window.MaxCallLimit)+1))
		}
		it.Call = window.Call{Alg: window.Algorithm(alg), Hits: v[0], Limit: v[1], Duration: v[2], Burst: v[3],
			Gregorian: flags&CallGregorian != 0, ResetRemaining: flags&CallResetRemaining != 0, DrainOverLimit: flags&CallDrainOverLimit != 0}
		if flags&(CallGrant|CallReturn) != 0 {
			it.Lease = CallLease{Grant: flags&CallGrant != 0, Return: flags&CallReturn != 0,
				Holder: string(d.bytes("holder", lease.MaxHolderLen))}
			a, b := d.uvarint("lease number"), min(d.uvarint("lease number"), uint64(window.MaxCallLimit)+1)
			if it.Lease.Grant {
				it.Lease.Want, it.Lease.LeaseMs = int64(min(a, uint64(window.MaxCallLimit)+1)), int64(b)
			} else {
				it.Lease.Index, it.Lease.Units = a, int64(b)
			}
		}
		e.Items = append(e.Items, it)
	}
	if err := d.end(); err != nil {
		return CallsEntry{}, err
	}
	if err := e.Validate(); err != nil {
		return CallsEntry{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return e, nil
}

// DecodeCalls decodes and validates a calls entry's bytes (what a node
// sends another: cluster's batched hop of per-call requests reuses the
// log's encoding).
func DecodeCalls(buf []byte) (CallsEntry, error) { return decodeCalls(buf) }
