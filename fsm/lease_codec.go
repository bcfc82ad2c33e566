package fsm

import (
	"encoding/binary"
	"fmt"

	"github.com/rlnode/rlnode/lease"
)

// Lease entry types (fsm/DESIGN.md, "Leases").
const (
	EntryGrant  byte = 7
	EntryReturn byte = 8
)

// RefundIndex in a ReturnItem names no grant: the item is a refund of the
// key's current window (fsm/DESIGN.md, "Refunds"). A release before this
// one halts on such an item (its decoder refused index 0) rather than
// applying it differently.
const RefundIndex uint64 = 0

// Bounds the lease decoders enforce.
const (
	// MaxGrantItems bounds the keys of one grant or return entry.
	MaxGrantItems = 1024
	// maxGrantsPerKey bounds the outstanding grants of one key; past it a
	// grant gets nothing until some expire or come back.
	maxGrantsPerKey = 256
)

// GrantItem asks for up to Want units of (Policy, Client).
type GrantItem struct {
	Policy, Client string
	Want           int64
}

// ReturnItem gives back Units of the grant made by the entry at Index;
// Units 0 releases a grant whose units were all spent (a token bucket's
// cap on what holders hold lifts at once instead of at expiry). Index
// RefundIndex (0, no grant) is a refund: Units (>= 1) come off the key's
// current window, never below zero, whoever holds grants on it.
type ReturnItem struct {
	Policy, Client string
	Index          uint64
	Units          int64
}

// ValidateHolder checks a holder id (what the decoder enforces).
func ValidateHolder(h string) error { return validID("holder", h, lease.MaxHolderLen) }

// Validate checks what the decoder enforces.
func (g GrantItem) Validate() error {
	if err := (Hit{Policy: g.Policy, Client: g.Client, Cost: 1}).Validate(); err != nil {
		return err
	}
	if g.Want < 1 || g.Want > MaxLimit {
		return fmt.Errorf("want %d out of range [1, %d]", g.Want, int64(MaxLimit))
	}
	return nil
}

// Validate checks what the decoder enforces.
func (r ReturnItem) Validate() error {
	if err := (Hit{Policy: r.Policy, Client: r.Client, Cost: 1}).Validate(); err != nil {
		return err
	}
	if r.Index == RefundIndex && r.Units == 0 {
		return fmt.Errorf("a refund (grant index 0) of 0 units")
	}
	if r.Units < 0 || r.Units > MaxLimit {
		return fmt.Errorf("units %d out of range [0, %d]", r.Units, int64(MaxLimit))
	}
	return nil
}

// EncodeGrant encodes a grant entry stamped with the leader's now.
//
//	type 7, version 1, varint now, holder, uvarint leaseMs,
//	uvarint n, n × (policy, client, uvarint want)
func EncodeGrant(now int64, holder string, leaseMs int64, items []GrantItem) []byte {
	b := []byte{EntryGrant, codecVersion}
	b = binary.AppendVarint(b, now)
	b = appendString(b, holder)
	b = binary.AppendUvarint(b, uint64(leaseMs))
	b = binary.AppendUvarint(b, uint64(len(items)))
	for _, it := range items {
		b = appendString(b, it.Policy)
		b = appendString(b, it.Client)
		b = binary.AppendUvarint(b, uint64(it.Want))
	}
	return b
}

type grantEntry struct {
	now     int64
	holder  string
	leaseMs int64
	items   []GrantItem
}

func decodeGrant(buf []byte) (grantEntry, error) {
	d, err := header(buf, EntryGrant)
	if err != nil {
		return grantEntry{}, err
	}
	var e grantEntry
	e.now = d.leaseNow()
	e.holder = string(d.id("holder", lease.MaxHolderLen))
	e.leaseMs = d.number("lease", lease.MaxLeaseMs)
	n := d.itemCount()
	for i := uint64(0); d.err == nil && i < n; i++ {
		it := GrantItem{Policy: string(d.id("policy", MaxPolicyLen)), Client: string(d.id("client", MaxClientLen))}
		it.Want = d.number("want", MaxLimit)
		e.items = append(e.items, it)
	}
	return e, d.end()
}

// EncodeReturn encodes a return entry stamped with the leader's now.
//
//	type 8, version 1, varint now, holder,
//	uvarint n, n × (policy, client, uvarint grant index, uvarint units)
func EncodeReturn(now int64, holder string, items []ReturnItem) []byte {
	b := []byte{EntryReturn, codecVersion}
	b = binary.AppendVarint(b, now)
	b = appendString(b, holder)
	b = binary.AppendUvarint(b, uint64(len(items)))
	for _, it := range items {
		b = appendString(b, it.Policy)
		b = appendString(b, it.Client)
		b = binary.AppendUvarint(b, it.Index)
		b = binary.AppendUvarint(b, uint64(it.Units))
	}
	return b
}

type returnEntry struct {
	now    int64
	holder string
	items  []ReturnItem
}

func decodeReturn(buf []byte) (returnEntry, error) {
	d, err := header(buf, EntryReturn)
	if err != nil {
		return returnEntry{}, err
	}
	var e returnEntry
	e.now = d.leaseNow()
	e.holder = string(d.id("holder", lease.MaxHolderLen))
	n := d.itemCount()
	for i := uint64(0); d.err == nil && i < n; i++ {
		it := ReturnItem{Policy: string(d.id("policy", MaxPolicyLen)), Client: string(d.id("client", MaxClientLen))}
		it.Index = d.uvarint("grant index")
		it.Units = int64(d.uvarint("units"))
		if d.err == nil && (it.Index == RefundIndex && it.Units == 0 || it.Units > MaxLimit) {
			d.fail("grant index %d, units %d", it.Index, it.Units)
		}
		e.items = append(e.items, it)
	}
	return e, d.end()
}

func (d *decoder) leaseNow() int64 {
	now := d.varint("now")
	if d.err == nil && now <= 0 {
		d.fail("now %d is not a Unix time", now)
	}
	return now
}

func (d *decoder) itemCount() uint64 {
	n := d.uvarint("item count")
	if d.err == nil && (n == 0 || n > MaxGrantItems) {
		d.fail("item count %d out of range", n)
	}
	return n
}
