package fsm

import (
	"encoding/binary"
	"fmt"
)

// Entry types of permits and reservations (fsm/DESIGN.md, "Permits and
// reservations"). Both need FormatR4 on every voter.
const (
	EntryPermit      byte = 10
	EntryReservation byte = 11
)

// PermitOp is what a permit entry does.
type PermitOp byte

// Permit operations.
const (
	PermitAcquire PermitOp = 1
	PermitRelease PermitOp = 2
	PermitRenew   PermitOp = 3
	// PermitReleaseOldest releases the key's oldest live permit, whoever
	// holds it (Envoy's is_negative_hits names no permit).
	PermitReleaseOldest PermitOp = 4
)

// Bounds of permits and reservations.
const (
	// MaxPermitTTLMs bounds a permit's or reservation's TTL: how long a
	// lost release or settle can keep a slot or a charge (1 h).
	MaxPermitTTLMs = 3_600_000
	// IDLen is the length of a permit or reservation id: 16 random bytes
	// in hex.
	IDLen = 32
	// MaxOwnerLen bounds the credential identity an id is bound to.
	MaxOwnerLen = 256
	// MaxReservationItems bounds the keys of one reservation.
	MaxReservationItems = 64
)

// PermitEntry is one permit operation, stamped by the leader.
type PermitEntry struct {
	Now    int64
	Op     PermitOp
	ID     string // empty only for PermitReleaseOldest
	Owner  string // the caller's credential identity, "" without one
	Policy string // acquire, release-oldest
	Client string // acquire, release-oldest
	TTLMs  int64  // acquire, renew
}

// ValidateID checks a permit or reservation id: IDLen lowercase hex digits.
func ValidateID(id string) error {
	if len(id) != IDLen {
		return fmt.Errorf("id %q: want %d hex digits", id, IDLen)
	}
	for _, c := range []byte(id) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return fmt.Errorf("id %q: want %d hex digits", id, IDLen)
		}
	}
	return nil
}

// ValidateTTL checks a permit's or reservation's TTL in ms.
func ValidateTTL(ms int64) error {
	if ms < 1 || ms > MaxPermitTTLMs {
		return fmt.Errorf("ttl %dms out of range (1ms to %dms)", ms, int64(MaxPermitTTLMs))
	}
	return nil
}

// Validate checks what the decoder enforces.
func (e PermitEntry) Validate() error {
	if e.Now <= 0 {
		return fmt.Errorf("now %d is not a Unix time", e.Now)
	}
	if len(e.Owner) > MaxOwnerLen {
		return fmt.Errorf("owner is %d bytes, at most %d", len(e.Owner), MaxOwnerLen)
	}
	switch e.Op {
	case PermitAcquire, PermitReleaseOldest:
		if err := (Hit{Policy: e.Policy, Client: e.Client, Cost: 1}).Validate(); err != nil {
			return err
		}
	case PermitRelease, PermitRenew:
	default:
		return fmt.Errorf("permit op %d is unknown", e.Op)
	}
	if e.Op != PermitReleaseOldest {
		if err := ValidateID(e.ID); err != nil {
			return err
		}
	}
	if e.Op == PermitAcquire || e.Op == PermitRenew {
		return ValidateTTL(e.TTLMs)
	}
	return nil
}

// EncodePermit encodes a permit entry.
//
//	type 10, version 1, varint now, op, id, owner, then
//	acquire: policy, client, uvarint ttlMs; release: -; renew: uvarint ttlMs;
//	release-oldest: policy, client
func EncodePermit(e PermitEntry) []byte {
	b := []byte{EntryPermit, codecVersion}
	b = binary.AppendVarint(b, e.Now)
	b = append(b, byte(e.Op))
	b = appendString(b, e.ID)
	b = appendString(b, e.Owner)
	if e.Op == PermitAcquire || e.Op == PermitReleaseOldest {
		b = appendString(b, e.Policy)
		b = appendString(b, e.Client)
	}
	if e.Op == PermitAcquire || e.Op == PermitRenew {
		b = binary.AppendUvarint(b, uint64(e.TTLMs))
	}
	return b
}

func decodePermit(buf []byte) (PermitEntry, error) {
	d, err := header(buf, EntryPermit)
	if err != nil {
		return PermitEntry{}, err
	}
	var e PermitEntry
	e.Now = d.leaseNow()
	e.Op = PermitOp(d.byte("permit op"))
	e.ID = string(d.bytes("permit id", IDLen))
	e.Owner = string(d.bytes("owner", MaxOwnerLen))
	if e.Op == PermitAcquire || e.Op == PermitReleaseOldest {
		e.Policy = string(d.id("policy", MaxPolicyLen))
		e.Client = string(d.id("client", MaxClientLen))
	}
	if e.Op == PermitAcquire || e.Op == PermitRenew {
		e.TTLMs = int64(d.uvarint("ttl"))
	}
	if err := d.end(); err != nil {
		return e, err
	}
	if err := e.Validate(); err != nil {
		return e, fmt.Errorf("%w: permit entry: %v", ErrCorrupt, err)
	}
	return e, nil
}

// ReservationOp is what a reservation entry does.
type ReservationOp byte

// Reservation operations.
const (
	ReservationReserve ReservationOp = 1
	ReservationSettle  ReservationOp = 2
	// ReservationSettleBounded (FormatR5) settles as ReservationSettle
	// but charges each key at most the room its limits have: a settle
	// never takes a key past its limit, so no settle can lock a key
	// (a token bucket's debt) beyond one window. What had no room is
	// the Overdraft, reported and not charged.
	ReservationSettleBounded ReservationOp = 3
)

// IsSettle says whether op settles a reservation.
func (op ReservationOp) IsSettle() bool {
	return op == ReservationSettle || op == ReservationSettleBounded
}

// ReserveItem charges Units to (Policy, Client).
type ReserveItem struct {
	Policy string `json:"policy"`
	Client string `json:"client"`
	Units  int64  `json:"units"`
}

// ReservationEntry is one reservation operation, stamped by the leader.
type ReservationEntry struct {
	Now   int64
	Op    ReservationOp
	ID    string
	Owner string
	TTLMs int64         // reserve
	Items []ReserveItem // reserve
	Units int64         // settle: the actual cost, 0 or more
}

// Validate checks what the decoder enforces.
func (e ReservationEntry) Validate() error {
	if e.Now <= 0 {
		return fmt.Errorf("now %d is not a Unix time", e.Now)
	}
	if err := ValidateID(e.ID); err != nil {
		return err
	}
	if len(e.Owner) > MaxOwnerLen {
		return fmt.Errorf("owner is %d bytes, at most %d", len(e.Owner), MaxOwnerLen)
	}
	switch e.Op {
	case ReservationReserve:
		if err := ValidateTTL(e.TTLMs); err != nil {
			return err
		}
		if len(e.Items) == 0 || len(e.Items) > MaxReservationItems {
			return fmt.Errorf("%d keys: want 1 to %d", len(e.Items), MaxReservationItems)
		}
		for i, it := range e.Items {
			if err := (Hit{Policy: it.Policy, Client: it.Client, Cost: 1}).Validate(); err != nil {
				return fmt.Errorf("keys[%d]: %w", i, err)
			}
			if it.Units < 1 || it.Units > MaxLimit {
				return fmt.Errorf("keys[%d].units %d out of range [1, %d]", i, it.Units, int64(MaxLimit))
			}
		}
	case ReservationSettle, ReservationSettleBounded:
		if e.Units < 0 || e.Units > MaxLimit {
			return fmt.Errorf("units %d out of range [0, %d]", e.Units, int64(MaxLimit))
		}
	default:
		return fmt.Errorf("reservation op %d is unknown", e.Op)
	}
	return nil
}

// EncodeReservation encodes a reservation entry.
//
//	type 11, version 1, varint now, op, id, owner, then
//	reserve: uvarint ttlMs, uvarint n, n × (policy, client, uvarint units);
//	settle, settle-bounded (op 3, FormatR5): uvarint units
func EncodeReservation(e ReservationEntry) []byte {
	b := []byte{EntryReservation, codecVersion}
	b = binary.AppendVarint(b, e.Now)
	b = append(b, byte(e.Op))
	b = appendString(b, e.ID)
	b = appendString(b, e.Owner)
	switch e.Op {
	case ReservationReserve:
		b = binary.AppendUvarint(b, uint64(e.TTLMs))
		b = binary.AppendUvarint(b, uint64(len(e.Items)))
		for _, it := range e.Items {
			b = appendString(b, it.Policy)
			b = appendString(b, it.Client)
			b = binary.AppendUvarint(b, uint64(it.Units))
		}
	case ReservationSettle, ReservationSettleBounded:
		b = binary.AppendUvarint(b, uint64(e.Units))
	}
	return b
}

func decodeReservation(buf []byte) (ReservationEntry, error) {
	d, err := header(buf, EntryReservation)
	if err != nil {
		return ReservationEntry{}, err
	}
	var e ReservationEntry
	e.Now = d.leaseNow()
	e.Op = ReservationOp(d.byte("reservation op"))
	e.ID = string(d.bytes("reservation id", IDLen))
	e.Owner = string(d.bytes("owner", MaxOwnerLen))
	switch e.Op {
	case ReservationReserve:
		e.TTLMs = int64(d.uvarint("ttl"))
		n := d.uvarint("key count")
		if d.err == nil && (n == 0 || n > MaxReservationItems) {
			d.fail("key count %d out of range", n)
		}
		for i := uint64(0); d.err == nil && i < n; i++ {
			it := ReserveItem{Policy: string(d.id("policy", MaxPolicyLen)), Client: string(d.id("client", MaxClientLen))}
			it.Units = int64(d.uvarint("units"))
			e.Items = append(e.Items, it)
		}
	case ReservationSettle, ReservationSettleBounded:
		e.Units = int64(d.uvarint("units"))
	}
	if err := d.end(); err != nil {
		return e, err
	}
	if err := e.Validate(); err != nil {
		return e, fmt.Errorf("%w: reservation entry: %v", ErrCorrupt, err)
	}
	return e, nil
}
