package fsm

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"slices"

	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/policy"
	"github.com/rlnode/rlnode/window"
)

// Snapshot format: magic, version, a header of the replicated scalars and
// node metadata, (version 2) the policy table, the live keys, then a CRC-32C
// of everything before it. The FSM streams it in one pass and Restore checks
// the CRC before swapping anything in, so a truncated or corrupt snapshot
// changes nothing. Version 1 (the release before policies: fixed windows
// only, no table) is still restored.
const (
	snapshotMagic = "RLNS"
	snapshotV1    = 1
	snapshotV2    = 2
	snapshotV3    = 3 // adds the outstanding lease grants after the keys
	// snapshotV4 adds the permits and the reservations after the grants;
	// written only when there are some (permit_snapshot.go).
	snapshotV4 = 4
	maxKeyLen  = 1 + MaxPolicyLen + MaxClientLen
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrBadSnapshot wraps every snapshot decoding failure.
var ErrBadSnapshot = errors.New("bad snapshot")

type fsmSnapshot struct {
	appliedIndex uint64
	lastNow      int64
	term         uint64
	offset       int64
	nodes        []Node
	nextEpoch    uint32
	seeded       bool
	policies     []byte            // uvarint n, n × (uvarint epoch, policy body)
	slots        frozenSlab[slot]  // the slab as of the snapshot (copy on write)
	epochs       map[string]uint32 // each table policy's epoch, to tell live keys
	grants       []byte            // the outstanding grants, encoded under the lock
	permits      []byte            // the permits, encoded under the lock
	reservations []byte            // the reservations, encoded under the lock
}

// alive is FSM.alive against the state frozen in the snapshot.
func (s *fsmSnapshot) alive(w *slot) bool {
	if w.key == "" || w.exp <= s.lastNow {
		return false
	}
	e, ok := s.epochs[policyOf(w.key)]
	switch {
	case isCallPolicy(policyOf(w.key)):
		e = callEpoch
	case !ok:
		e = s.nextEpoch
	}
	return w.epoch == e
}

// Snapshot freezes the state under the lock: the slab is copy on write, so
// that costs a pointer per 64 keys, not a copy of every key (about 100 ms
// of stalled applies for a million keys when it encoded them here).
// Persist picks the live keys and streams them without holding anything.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock() // Freeze starts a new generation of the slab
	defer f.mu.Unlock()
	if f.halted != nil {
		return nil, ErrHalted
	}
	s := &fsmSnapshot{appliedIndex: f.appliedIndex, lastNow: f.lastNow, term: f.term, offset: f.offset}
	for _, n := range f.nodes {
		s.nodes = append(s.nodes, n)
	}
	s.nextEpoch, s.seeded = f.nextEpoch, f.seeded
	ps := f.sortedPolicies()
	s.policies = binary.AppendUvarint(nil, uint64(len(ps)))
	for _, p := range ps {
		s.policies = appendPolicy(s.policies, p)
	}
	s.epochs = make(map[string]uint32, len(f.policies))
	for name, p := range f.policies {
		s.epochs[name] = p.epoch
	}
	s.grants = f.appendGrants(nil)
	s.permits, s.reservations = f.appendPermits(nil), f.appendReservations(nil)
	s.slots = f.slab.Freeze()
	return s, nil
}

// Persist writes the snapshot and cancels the sink on any error.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.write(sink); err != nil {
		sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	return sink.Close()
}

// write streams the snapshot to w.
func (s *fsmSnapshot) write(w io.Writer) error {
	crc := crc32.New(crcTable)
	bw := bufio.NewWriterSize(io.MultiWriter(w, crc), 1<<16)
	var buf []byte
	buf = append(buf, snapshotMagic...)
	if s.hasPermitState() {
		buf = append(buf, snapshotV4)
	} else {
		buf = append(buf, snapshotV3)
	}
	buf = binary.AppendUvarint(buf, s.appliedIndex)
	buf = binary.AppendVarint(buf, s.lastNow)
	buf = binary.AppendUvarint(buf, s.term)
	buf = binary.AppendVarint(buf, s.offset)
	buf = binary.AppendUvarint(buf, uint64(len(s.nodes)))
	for _, n := range s.nodes {
		buf = appendString(buf, n.ID)
		buf = appendString(buf, n.RaftAddr)
		buf = appendString(buf, n.HTTPAddr)
	}
	buf = binary.AppendUvarint(buf, uint64(s.nextEpoch))
	if s.seeded {
		buf = append(buf, 1)
	} else {
		buf = append(buf, 0)
	}
	buf = appendString(buf, string(s.policies))
	count := 0
	s.slots.Each(func(w *slot) {
		if s.alive(w) {
			count++
		}
	})
	buf = binary.AppendUvarint(buf, uint64(count))
	if _, err := bw.Write(buf); err != nil {
		return err
	}
	var werr error
	s.slots.Each(func(w *slot) {
		if werr == nil && s.alive(w) {
			buf = appendSlot(buf[:0], w)
			_, werr = bw.Write(buf)
		}
	})
	if werr != nil {
		return werr
	}
	if _, err := bw.Write(s.grants); err != nil {
		return err
	}
	if s.hasPermitState() {
		if _, err := bw.Write(s.permits); err != nil {
			return err
		}
		if _, err := bw.Write(s.reservations); err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	_, err := w.Write(binary.BigEndian.AppendUint32(nil, crc.Sum32()))
	return err
}

// Release is a no-op: the copy is garbage once Persist returns.
func (s *fsmSnapshot) Release() {}

// Restore replaces the whole state with a snapshot. It builds the new state
// aside and swaps it in only once the snapshot has been read and verified.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	fresh := New(f.cfg)
	if err := fresh.readSnapshot(rc); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.index, f.slab, f.free, f.heap, f.nodes = fresh.index, fresh.slab, fresh.free, fresh.heap, fresh.nodes
	f.grants, f.grantHeap, f.grantsUntil = fresh.grants, fresh.grantHeap, fresh.grantsUntil
	f.slices = nil // term-bound, never restored (slice.go)
	f.permits, f.permitKey, f.permitHeap = fresh.permits, fresh.permitKey, fresh.permitHeap
	f.reservations, f.reservationHeap, f.counts = fresh.reservations, fresh.reservationHeap, fresh.counts
	f.policies, f.nextEpoch, f.seeded = fresh.policies, fresh.nextEpoch, fresh.seeded
	f.tableVersion.Add(1)
	f.sweepLeft, f.sweepPos = 0, 0
	f.lastNow, f.term, f.offset, f.appliedIndex = fresh.lastNow, fresh.term, fresh.offset, fresh.appliedIndex
	f.recountCalls()
	f.halted = nil
	return nil
}

// snapReader decodes with the same never-panic rules as the entry decoder.
type snapReader struct {
	r   *bufio.Reader
	crc hash.Hash32
	err error
	buf []byte
	one [1]byte // ReadByte's CRC input; a []byte{b} literal escaped and allocated per byte
}

func (r *snapReader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", ErrBadSnapshot, fmt.Sprintf(format, args...))
	}
}

func (r *snapReader) ReadByte() (byte, error) {
	b, err := r.r.ReadByte()
	if err == nil {
		r.one[0] = b
		r.crc.Write(r.one[:])
	}
	return b, err
}

func (r *snapReader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, err := binary.ReadUvarint(r)
	if err != nil {
		r.fail("%s: %v", what, err)
	}
	return v
}

func (r *snapReader) varint(what string) int64 {
	if r.err != nil {
		return 0
	}
	v, err := binary.ReadVarint(r)
	if err != nil {
		r.fail("%s: %v", what, err)
	}
	return v
}

func (r *snapReader) bytes(what string, max int) []byte {
	n := r.uvarint(what + " length")
	if r.err != nil {
		return nil
	}
	if n > uint64(max) {
		r.fail("%s length %d exceeds %d", what, n, max)
		return nil
	}
	r.buf = slices.Grow(r.buf[:0], int(n))[:n]
	if _, err := io.ReadFull(r.r, r.buf); err != nil {
		r.fail("%s: %v", what, err)
		return nil
	}
	r.crc.Write(r.buf)
	return r.buf
}

func (f *FSM) readSnapshot(src io.Reader) error {
	r := &snapReader{r: bufio.NewReaderSize(src, 1<<16), crc: crc32.New(crcTable)}
	magic := make([]byte, len(snapshotMagic)+1)
	if _, err := io.ReadFull(r.r, magic); err != nil {
		return fmt.Errorf("%w: header: %v", ErrBadSnapshot, err)
	}
	r.crc.Write(magic)
	if string(magic[:4]) != snapshotMagic {
		return fmt.Errorf("%w: not an rlnode snapshot", ErrBadSnapshot)
	}
	version := magic[4]
	if version < snapshotV1 || version > snapshotV4 {
		return fmt.Errorf("%w: version %d is unknown to this node", ErrBadSnapshot, magic[4])
	}
	f.appliedIndex = r.uvarint("applied index")
	f.lastNow = r.varint("applied time")
	f.term = r.uvarint("term")
	f.offset = r.varint("clock offset")
	nodes := r.uvarint("node count")
	if nodes > 1<<16 {
		r.fail("%d nodes", nodes)
	}
	for i := uint64(0); r.err == nil && i < nodes; i++ {
		n := Node{ID: string(r.bytes("node id", maxMetaLen))}
		n.RaftAddr = string(r.bytes("raft address", maxMetaLen))
		n.HTTPAddr = string(r.bytes("http address", maxMetaLen))
		f.nodes[n.ID] = n
	}
	if version >= snapshotV2 {
		f.readTable(r)
	}
	count := r.uvarint("key count")
	if count > 1<<32-1 {
		r.fail("%d keys", count)
	}
	if r.err == nil {
		f.index = make(map[string]uint32, count)
		f.slab = newSlab()
	}
	for i := uint64(0); r.err == nil && i < count; i++ {
		var s slot
		if version == snapshotV1 {
			s = r.slotV1()
		} else {
			s = r.slot()
		}
		if r.err != nil {
			break
		}
		if _, dup := f.index[s.key]; dup {
			r.fail("key %d repeats a key", i)
			break
		}
		idx := f.slab.Append()
		*f.slab.Mut(idx) = s
		f.index[s.key] = idx
	}
	if version >= snapshotV3 {
		f.readGrants(r)
	}
	if version >= snapshotV4 {
		f.readPermits(r)
		f.readReservations(r)
	}
	if r.err != nil {
		return r.err
	}
	want := r.crc.Sum32()
	var tail [4]byte
	if _, err := io.ReadFull(r.r, tail[:]); err != nil {
		return fmt.Errorf("%w: checksum: %v", ErrBadSnapshot, err)
	}
	if got := binary.BigEndian.Uint32(tail[:]); got != want {
		return fmt.Errorf("%w: checksum %08x, computed %08x", ErrBadSnapshot, got, want)
	}
	if _, err := r.r.ReadByte(); err != io.EOF {
		return fmt.Errorf("%w: trailing data after checksum", ErrBadSnapshot)
	}
	f.rebuildExpiry()
	f.rebuildGrantHeap()
	f.rebuildPermitIndex()
	f.rebuildReservationHeap()
	f.rebuildBudgetCounts()
	return nil
}

// readTable reads version 2's policy table.
func (f *FSM) readTable(r *snapReader) {
	next := r.uvarint("next epoch")
	seeded := r.byte("seeded")
	blob := r.bytes("policy table", 1<<24)
	if r.err != nil {
		return
	}
	if next > 1<<32-1 || seeded > 1 {
		r.fail("table header %d %d", next, seeded)
		return
	}
	f.nextEpoch, f.seeded = uint32(next), seeded == 1
	d := decoder{buf: blob}
	n := d.uvarint("policy count")
	for i := uint64(0); d.err == nil && i < n; i++ {
		epoch := d.uvarint("epoch")
		p, err := d.policy()
		if d.err == nil && (err != nil || epoch > uint64(f.nextEpoch) || f.policies[p.Name] != nil) {
			d.fail("policy %d is malformed: %v", i, err)
		}
		if d.err == nil {
			f.policies[p.Name] = newTablePolicy(p, uint32(epoch))
		}
	}
	if err := d.end(); err != nil {
		r.fail("policy table: %v", err)
	}
}

func (r *snapReader) byte(what string) byte {
	if r.err != nil {
		return 0
	}
	b, err := r.ReadByte()
	if err != nil {
		r.fail("%s: %v", what, err)
	}
	return b
}

// slot reads one key of version 2.
func (r *snapReader) slot() slot {
	s := slot{key: string(r.bytes("key", maxKeyLen))}
	s.exp = r.varint("expiry")
	epoch := r.uvarint("epoch")
	s.alg = window.Algorithm(r.byte("algorithm"))
	s.n = r.byte("limit count")
	if r.err != nil {
		return s
	}
	if !validKey(s.key) || epoch > 1<<32-1 || s.n < 1 || int(s.n) > policy.MaxLimits || s.alg.String() == "unknown" {
		r.fail("key %q is malformed", s.key)
		return s
	}
	s.epoch = uint32(epoch)
	if s.n > 1 {
		m := make([]limState, s.n-1)
		s.more = &m
	}
	for i := range int(s.n) {
		st := s.state(i)
		st.windowMs = int64(r.uvarint("window"))
		st.s = window.State{A: r.varint("state"), B: r.varint("state"), C: r.varint("state")}
		if r.err == nil && (st.windowMs < 1 || st.windowMs > MaxWindowMs) {
			r.fail("key %q has window %d", s.key, st.windowMs)
		}
	}
	return s
}

// slotV1 reads one window of version 1: a fixed window of the policy
// incarnation every later policy of that name starts in (epoch 0).
func (r *snapReader) slotV1() slot {
	s := slot{key: string(r.bytes("window key", maxKeyLen)), alg: window.FixedWindow, n: 1}
	start, count := r.varint("window start"), int64(r.uvarint("window count"))
	s.first = limState{s: window.State{A: start, B: count}, windowMs: int64(r.uvarint("window length"))}
	s.exp = start + s.first.windowMs
	if r.err == nil && (!validKey(s.key) || count < 0 || count > MaxLimit || s.first.windowMs < 1 || s.first.windowMs > MaxWindowMs) {
		r.fail("window %q is malformed", s.key)
	}
	return s
}

func validKey(key string) bool { return len(key) >= 2 && int(key[0]) < len(key)-1 && key[0] > 0 }
