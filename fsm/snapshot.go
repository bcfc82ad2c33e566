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
)

// Snapshot format: magic, version, a header of the replicated scalars and
// node metadata, the live windows, then a CRC-32C of everything before it.
// The FSM streams it in one pass and Restore checks the CRC before swapping
// anything in, so a truncated or corrupt snapshot changes nothing.
const (
	snapshotMagic   = "RLNS"
	snapshotVersion = 1
	maxKeyLen       = 1 + MaxPolicyLen + MaxClientLen
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
	windows      []slot
}

// Snapshot copies the live state under the lock; Persist streams it later
// without holding anything.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.halted != nil {
		return nil, ErrHalted
	}
	s := &fsmSnapshot{appliedIndex: f.appliedIndex, lastNow: f.lastNow, term: f.term, offset: f.offset}
	for _, n := range f.nodes {
		s.nodes = append(s.nodes, n)
	}
	s.windows = make([]slot, 0, len(f.index))
	for i := range f.slab {
		w := &f.slab[i]
		if w.key != "" && w.start+w.windowMs > f.lastNow {
			s.windows = append(s.windows, *w)
		}
	}
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
	buf = append(buf, snapshotVersion)
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
	buf = binary.AppendUvarint(buf, uint64(len(s.windows)))
	if _, err := bw.Write(buf); err != nil {
		return err
	}
	for i := range s.windows {
		w := &s.windows[i]
		buf = appendString(buf[:0], w.key)
		buf = binary.AppendVarint(buf, w.start)
		buf = binary.AppendUvarint(buf, uint64(w.count))
		buf = binary.AppendUvarint(buf, uint64(w.windowMs))
		if _, err := bw.Write(buf); err != nil {
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
	f.index, f.slab, f.free, f.expiry, f.nodes = fresh.index, fresh.slab, fresh.free, fresh.expiry, fresh.nodes
	f.lastNow, f.term, f.offset, f.appliedIndex = fresh.lastNow, fresh.term, fresh.offset, fresh.appliedIndex
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
	if magic[4] != snapshotVersion {
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
	count := r.uvarint("window count")
	if count > 1<<32-1 {
		r.fail("%d windows", count)
	}
	if r.err == nil {
		f.index = make(map[string]uint32, count)
		f.slab = make([]slot, 0, count)
	}
	for i := uint64(0); r.err == nil && i < count; i++ {
		key := string(r.bytes("window key", maxKeyLen))
		s := slot{key: key, start: r.varint("window start"), count: int64(r.uvarint("window count"))}
		s.windowMs = int64(r.uvarint("window length"))
		if r.err != nil {
			break
		}
		if len(key) < 2 || int(key[0]) >= len(key) || s.count < 0 || s.count > MaxLimit || s.windowMs < 1 || s.windowMs > MaxWindowMs {
			r.fail("window %d is malformed", i)
			break
		}
		if _, dup := f.index[key]; dup {
			r.fail("window %d repeats a key", i)
			break
		}
		f.slab = append(f.slab, s)
		f.index[key] = uint32(len(f.slab) - 1)
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
	return nil
}
