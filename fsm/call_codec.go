package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"

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
	callFlags = CallGregorian | CallResetRemaining | CallDrainOverLimit
)

// CallItem is one per-call item: Name and Key name the state (gubernator's
// name and unique_key), the rest is the call.
type CallItem struct {
	Name, Key string
	Call      window.Call
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
	return it.Call.Validate()
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
// hits, limit, duration, burst).
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
		for _, f := range []struct {
			on  bool
			bit byte
		}{{c.Gregorian, CallGregorian}, {c.ResetRemaining, CallResetRemaining}, {c.DrainOverLimit, CallDrainOverLimit}} {
			if f.on {
				flags |= f.bit
			}
		}
		b = append(b, byte(c.Alg), flags)
		for _, v := range []int64{c.Hits, c.Limit, c.Duration, c.Burst} {
			b = binary.AppendUvarint(b, uint64(v))
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
