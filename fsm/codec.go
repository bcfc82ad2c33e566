package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Entry types: the first byte of every log entry rlnode writes.
//
// A type with IgnoreUnknown set may be skipped by a node that does not know
// it (for optional entries added later); any other unknown type halts the
// node, because skipping it would let replicas diverge.
const (
	EntryHits         byte = 1
	EntrySetNode      byte = 2
	EntryRemoveNode   byte = 3
	EntrySetPolicies  byte = 4
	EntryDeletePolicy byte = 5
	EntryResetKey     byte = 6
	// 7 and 8 are lease grants and returns (lease_codec.go).
	// EntryCounter is an admin counter write: set a key's used count, or
	// count without a limit check (sub-kinds CounterSet, CounterInc).
	EntryCounter byte = 9

	IgnoreUnknown byte = 0x80
)

// codecVersion is the second byte of every entry. Decoders accept only the
// versions they know, so a newer leader's format is never misread. Hits
// entries have two: version 1 (each hit carries its limit and window, as
// the release before policies wrote them) and version 2 (hits name a policy
// of the replicated table and come in all-or-nothing groups).
const (
	codecVersion byte = 1
	hitsV1       byte = 1
	hitsV2       byte = 2
)

// Limits that the decoder enforces. They are wider than what the HTTP layer
// accepts, so a valid request always encodes, and tight enough that a corrupt
// entry cannot make the decoder allocate without bound.
const (
	MaxClientLen   = 256
	MaxPolicyLen   = 64
	MaxHitsPerLog  = 1 << 16
	MaxWindowMs    = 366 * 24 * 3600 * 1000
	MaxLimit       = 1 << 40
	maxMetaLen     = 512
	minEntryHeader = 2
)

// ErrCorrupt wraps every decoding failure.
var ErrCorrupt = errors.New("corrupt log entry")

// HitV1 is a hit of a version-1 entry, written by the release before
// policies were replicated: Limit and WindowMs travel with the hit and it is
// decided as a fixed window. Nodes still apply such entries from old logs;
// they write version 2 only.
type HitV1 struct {
	Policy   string
	Client   string
	Limit    int64
	WindowMs int64
	Cost     int64
}

// Validate checks what Apply relies on. The HTTP layer validates user input
// first with friendlier messages; this is the last line before the log.
func (h HitV1) Validate() error {
	if err := ValidateClient(h.Client); err != nil {
		return err
	}
	if err := validID("policy", h.Policy, MaxPolicyLen); err != nil {
		return err
	}
	return validNumbers(h.Limit, h.WindowMs, h.Cost)
}

func validNumbers(limit, windowMs, cost int64) error {
	if limit < 1 || limit > MaxLimit {
		return fmt.Errorf("limit %d out of range [1, %d]", limit, int64(MaxLimit))
	}
	if windowMs < 1 || windowMs > MaxWindowMs {
		return fmt.Errorf("windowMs %d out of range [1, %d]", windowMs, int64(MaxWindowMs))
	}
	if cost < 1 || cost > MaxLimit+1 {
		return fmt.Errorf("cost %d out of range [1, %d]", cost, int64(MaxLimit+1))
	}
	return nil
}

// ValidateClient checks a client id: non-empty, at most MaxClientLen bytes,
// UTF-8 without control characters. The HTTP layer and the decoder share it.
func ValidateClient(id string) error { return validID("client id", id, MaxClientLen) }

// MaxNodeIDLen is the longest node id the API and serve accept (the log
// takes up to maxMetaLen).
const MaxNodeIDLen = 256

// ValidateNode checks what decodeSetNode enforces, so a valid node's entry
// always decodes: an id the decoder refuses would halt every replica at
// that entry, and again at every restart.
func ValidateNode(n Node) error {
	errs := []error{validID("node id", n.ID, MaxNodeIDLen)}
	for _, a := range []struct{ what, v string }{{"raft address", n.RaftAddr}, {"http address", n.HTTPAddr}} {
		if a.v != "" {
			errs = append(errs, validID(a.what, a.v, maxMetaLen))
		}
	}
	return errors.Join(errs...)
}

// CheckEntry decodes an entry other than hits without applying it, so a
// leader never proposes one its own decoder (and every replica's) would
// refuse. Hits entries are built from validated hits and are left to
// Apply: decoding each batch twice would cost the hot path.
func CheckEntry(data []byte) error {
	if len(data) == 0 {
		return fmt.Errorf("%w: empty entry", ErrCorrupt)
	}
	var err error
	switch data[0] {
	case EntryHits:
	case EntrySetNode:
		_, err = decodeSetNode(data)
	case EntryRemoveNode:
		_, err = decodeRemoveNode(data)
	case EntrySetPolicies:
		_, _, err = decodeSetPolicies(data)
	case EntryDeletePolicy:
		_, err = decodeDeletePolicy(data)
	case EntryResetKey:
		_, _, err = decodeResetKey(data)
	case EntryGrant:
		_, err = decodeGrant(data)
	case EntryReturn:
		_, err = decodeReturn(data)
	case EntryCounter:
		_, err = decodeCounter(data)
	case EntryPermit:
		_, err = decodePermit(data)
	case EntryReservation:
		_, err = decodeReservation(data)
	case EntrySlices:
		_, err = decodeSlices(data)
	case EntryCalls:
		_, err = decodeCalls(data)
	}
	return err
}

// validID accepts a non-empty UTF-8 string of at most max bytes with no
// control characters. It takes the entry's bytes or a caller's string
// without converting either.
func validID[T string | []byte](what string, b T, max int) error {
	if len(b) == 0 {
		return fmt.Errorf("%s is empty", what)
	}
	if len(b) > max {
		return fmt.Errorf("%s is %d bytes, longer than %d", what, len(b), max)
	}
	printable := true // the common case: printable ASCII, nothing more to check
	for i := 0; i < len(b); i++ {
		if c := b[i]; c < 0x20 || c >= 0x7f {
			printable = false
			break
		}
	}
	if printable {
		return nil
	}
	if !utf8.ValidString(string(b)) {
		return fmt.Errorf("%s is not valid UTF-8", what)
	}
	for _, r := range string(b) {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return fmt.Errorf("%s contains control character %U", what, r)
		}
	}
	return nil
}

// AppendHitsV1 encodes a version-1 batch of hits stamped with the leader's
// now (Unix ms), for tests and the old-data fixture.
func AppendHitsV1(dst []byte, now int64, hits []HitV1) []byte {
	dst = append(dst, EntryHits, hitsV1)
	dst = binary.AppendVarint(dst, now)
	dst = binary.AppendUvarint(dst, uint64(len(hits)))
	for i := range hits {
		h := &hits[i]
		dst = appendString(dst, h.Policy)
		dst = appendString(dst, h.Client)
		dst = binary.AppendUvarint(dst, uint64(h.Limit))
		dst = binary.AppendUvarint(dst, uint64(h.WindowMs))
		dst = binary.AppendUvarint(dst, uint64(h.Cost))
	}
	return dst
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// hitView is a decoded hit whose strings still point into the entry, so
// decoding a batch allocates nothing. limit and windowMs are set for
// version-1 hits only; group is the size of the all-or-nothing group the hit
// starts (0 for the group's later hits).
type hitView struct {
	policy, client        []byte
	limit, windowMs, cost int64
	group                 int
}

// decoder reads one entry; it never panics, whatever the bytes.
type decoder struct {
	buf []byte
	off int
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: at byte %d: %s", ErrCorrupt, d.off, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) uvarint(what string) uint64 { return readVarint(d, what, binary.Uvarint) }

func (d *decoder) varint(what string) int64 { return readVarint(d, what, binary.Varint) }

// readVarint reads one varint of either kind (binary.Uvarint or
// binary.Varint).
func readVarint[T uint64 | int64](d *decoder, what string, read func([]byte) (T, int)) T {
	if d.err != nil {
		return 0
	}
	v, n := read(d.buf[d.off:])
	if n <= 0 {
		d.fail("bad %s", what)
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) bytes(what string, max int) []byte {
	if d.err != nil {
		return nil
	}
	// Decode the length here rather than through uvarint(what+" length"):
	// that concatenation allocated on every call, twice per hit.
	n, size := binary.Uvarint(d.buf[d.off:])
	if size <= 0 {
		d.fail("bad %s length", what)
		return nil
	}
	d.off += size
	if n > uint64(max) || n > uint64(len(d.buf)-d.off) {
		d.fail("%s length %d too long", what, n)
		return nil
	}
	b := d.buf[d.off : d.off+int(n)]
	d.off += int(n)
	return b
}

func (d *decoder) id(what string, max int) []byte {
	b := d.bytes(what, max)
	if d.err == nil {
		if err := validID(what, b, max); err != nil {
			d.fail("%v", err)
		}
	}
	return b
}

func (d *decoder) number(what string, max uint64) int64 {
	v := d.uvarint(what)
	if d.err == nil && (v < 1 || v > max) {
		d.fail("%s %d out of range", what, v)
	}
	return int64(v)
}

func (d *decoder) end() error {
	if d.err == nil && d.off != len(d.buf) {
		d.fail("%d trailing bytes", len(d.buf)-d.off)
	}
	return d.err
}

// header checks the type and version bytes.
func header(buf []byte, want byte) (decoder, error) {
	return headerV(buf, want, codecVersion)
}

func headerV(buf []byte, want, version byte) (decoder, error) {
	if len(buf) < minEntryHeader {
		return decoder{}, fmt.Errorf("%w: %d bytes is shorter than a header", ErrCorrupt, len(buf))
	}
	if buf[0] != want {
		return decoder{}, fmt.Errorf("%w: type %d, want %d", ErrCorrupt, buf[0], want)
	}
	if buf[1] != version {
		return decoder{}, fmt.Errorf("%w: version %d of entry type %d is unknown to this node", ErrCorrupt, buf[1], buf[0])
	}
	return decoder{buf: buf, off: minEntryHeader}, nil
}

// decodeHitsV1 decodes a version-1 hits entry into views appended to dst
// (reused by the caller between entries); every hit is a group of one.
func decodeHitsV1(buf []byte, dst []hitView) (now int64, hits []hitView, err error) {
	d, err := headerV(buf, EntryHits, hitsV1)
	if err != nil {
		return 0, dst, err
	}
	now = d.varint("now")
	if d.err == nil && now <= 0 {
		d.fail("now %d is not a Unix time", now)
	}
	n := d.uvarint("hit count")
	if d.err == nil && (n == 0 || n > MaxHitsPerLog) {
		d.fail("hit count %d out of range", n)
	}
	for i := uint64(0); d.err == nil && i < n; i++ {
		var h hitView
		h.policy = d.id("policy", MaxPolicyLen)
		h.client = d.id("client", MaxClientLen)
		h.limit = d.number("limit", MaxLimit)
		h.windowMs = d.number("windowMs", MaxWindowMs)
		h.cost = d.number("cost", MaxLimit+1)
		h.group = 1
		dst = append(dst, h)
	}
	if err := d.end(); err != nil {
		return 0, dst[:0], err
	}
	return now, dst, nil
}

// DecodeHitsV1 decodes a version-1 hits entry; for tests and tools, since
// it copies every string.
func DecodeHitsV1(buf []byte) (now int64, hits []HitV1, err error) {
	now, views, err := decodeHitsV1(buf, nil)
	if err != nil {
		return 0, nil, err
	}
	hits = make([]HitV1, len(views))
	for i, v := range views {
		hits[i] = HitV1{Policy: string(v.policy), Client: string(v.client), Limit: v.limit, WindowMs: v.windowMs, Cost: v.cost}
	}
	return now, hits, nil
}

// Node is the replicated metadata of one cluster member: where its HTTP API
// is, so every node can forward to the leader.
type Node struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raftAddr"`
	HTTPAddr string `json:"httpAddr"`
}

// EncodeSetNode encodes an entry that records (or replaces) a node's metadata.
func EncodeSetNode(n Node) []byte {
	b := []byte{EntrySetNode, codecVersion}
	b = appendString(b, n.ID)
	b = appendString(b, n.RaftAddr)
	return appendString(b, n.HTTPAddr)
}

// EncodeRemoveNode encodes an entry that forgets a node's metadata.
func EncodeRemoveNode(id string) []byte {
	return appendString([]byte{EntryRemoveNode, codecVersion}, id)
}

func decodeSetNode(buf []byte) (Node, error) {
	d, err := header(buf, EntrySetNode)
	if err != nil {
		return Node{}, err
	}
	n := Node{
		ID:       string(d.id("node id", maxMetaLen)),
		RaftAddr: string(d.bytes("raft address", maxMetaLen)),
		HTTPAddr: string(d.bytes("http address", maxMetaLen)),
	}
	return n, d.end()
}

func decodeRemoveNode(buf []byte) (string, error) {
	d, err := header(buf, EntryRemoveNode)
	if err != nil {
		return "", err
	}
	id := string(d.id("node id", maxMetaLen))
	return id, d.end()
}
