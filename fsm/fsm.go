// Package fsm is rlnode's raft.FSM: the windows of every (policy, client)
// key, changed only by applying log entries with window.Decide.
//
// Everything Apply needs travels in the entry (the leader's now, each hit's
// limit and window), so every replica reaches the same state.
package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/window"
)

// ErrHalted is returned by Apply after the FSM met an entry it cannot apply
// safely; see Config.OnFatal.
var ErrHalted = errors.New("state machine halted after an unreadable log entry")

// Config configures an FSM.
type Config struct {
	// OnFatal is called once when an entry can't be applied (an unknown
	// type or a corrupt body). Applying nothing more is the only way to keep
	// replicas from diverging, so the FSM halts; the owner should stop the
	// node. Nil means only halting.
	OnFatal func(error)
	// ExpireBudget bounds how many lapsed windows one Apply deletes, so a
	// burst of expiries cannot stall an entry. Zero means 256.
	ExpireBudget int
}

// HitsResult is what Apply returns for a hits entry, one decision per hit in
// entry order.
type HitsResult struct {
	Now       int64
	Decisions []window.Decision
}

// slot is one stored window. Slots live in a slab indexed from the key map so
// the hot path updates them in place without allocating.
type slot struct {
	key      string
	start    int64
	count    int64
	windowMs int64
}

// FSM implements raft.FSM.
type FSM struct {
	cfg Config

	mu    sync.RWMutex
	index map[string]uint32
	slab  []slot
	free  []uint32
	// expiry holds one FIFO per window length, sorted by window length so
	// expiry visits them in a deterministic order.
	expiry []*expiryQueue
	nodes  map[string]Node

	// Time: lastNow is the clamped time of the last applied hits entry;
	// term and offset implement the per-term catch-up of DESIGN.md.
	lastNow int64
	term    uint64
	offset  int64

	appliedIndex uint64
	halted       error

	// Scratch reused across Apply calls (raft applies serially).
	views []hitView
	key   []byte
}

// New returns an empty FSM.
func New(cfg Config) *FSM {
	if cfg.ExpireBudget <= 0 {
		cfg.ExpireBudget = 256
	}
	f := &FSM{cfg: cfg}
	f.reset()
	return f
}

func (f *FSM) reset() {
	f.index = make(map[string]uint32)
	f.slab = nil
	f.free = nil
	f.expiry = nil
	f.nodes = make(map[string]Node)
	f.lastNow, f.term, f.offset, f.appliedIndex = 0, 0, 0, 0
}

// Apply applies one committed log entry.
func (f *FSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.halted != nil {
		return ErrHalted
	}
	if l.Type != raft.LogCommand {
		return nil
	}
	f.appliedIndex = l.Index
	if len(l.Data) == 0 {
		return f.halt(fmt.Errorf("%w: empty entry at index %d", ErrCorrupt, l.Index))
	}
	switch l.Data[0] {
	case EntryHits:
		return f.applyHits(l)
	case EntrySetNode:
		n, err := decodeSetNode(l.Data)
		if err != nil {
			return f.halt(fmt.Errorf("index %d: %w", l.Index, err))
		}
		f.nodes[n.ID] = n
		return nil
	case EntryRemoveNode:
		id, err := decodeRemoveNode(l.Data)
		if err != nil {
			return f.halt(fmt.Errorf("index %d: %w", l.Index, err))
		}
		delete(f.nodes, id)
		return nil
	default:
		if l.Data[0]&IgnoreUnknown != 0 {
			return nil
		}
		return f.halt(fmt.Errorf("%w: unknown entry type %d at index %d (is this node older than the leader?)", ErrCorrupt, l.Data[0], l.Index))
	}
}

func (f *FSM) halt(err error) error {
	f.halted = err
	if f.cfg.OnFatal != nil {
		f.cfg.OnFatal(err)
	}
	return err
}

// clock turns the leader's stamp into the applied time: never backwards, and
// after a failover to a leader whose clock is behind, shifted by the lag so
// time keeps moving instead of freezing.
func (f *FSM) clock(term uint64, stamped int64) int64 {
	if term != f.term {
		f.term = term
		f.offset = max(0, f.lastNow-stamped)
	}
	now := max(stamped+f.offset, f.lastNow)
	f.lastNow = now
	return now
}

func (f *FSM) applyHits(l *raft.Log) any {
	stamped, views, err := decodeHits(l.Data, f.views[:0])
	f.views = views[:0]
	if err != nil {
		return f.halt(fmt.Errorf("index %d: %w", l.Index, err))
	}
	now := f.clock(l.Term, stamped)
	f.expire(now, f.cfg.ExpireBudget+len(views))
	res := &HitsResult{Now: now, Decisions: make([]window.Decision, len(views))}
	for i := range views {
		h := &views[i]
		f.key = appendKey(f.key[:0], h.policy, h.client)
		idx, ok := f.index[string(f.key)]
		var prevStart, prevCount int64
		if ok {
			// A window that has lapsed but is not yet expired must decide
			// as if it were gone: a replica restored from a snapshot no
			// longer has it (snapshots keep live windows only), and the
			// two must agree even if this hit carries a longer window.
			if s := &f.slab[idx]; s.start+s.windowMs > now {
				prevStart, prevCount = s.start, s.count
			}
		}
		d := window.Decide(prevStart, prevCount, now, h.windowMs, h.limit, h.cost)
		res.Decisions[i] = d
		if d.Outcome != window.Allowed {
			continue
		}
		if !ok {
			idx = f.insert(string(f.key))
		}
		s := &f.slab[idx]
		opened := !ok || s.start != d.WindowStart || s.windowMs != h.windowMs
		s.start, s.count, s.windowMs = d.WindowStart, d.Count, h.windowMs
		if opened {
			f.queueFor(h.windowMs).push(idx, d.WindowStart)
		}
	}
	return res
}

// appendKey builds the map key: a length byte for the policy keeps
// (policy, client) pairs unambiguous.
func appendKey(dst, policy, client []byte) []byte {
	dst = append(dst, byte(len(policy)))
	dst = append(dst, policy...)
	return append(dst, client...)
}

func (f *FSM) insert(key string) uint32 {
	var idx uint32
	if n := len(f.free); n > 0 {
		idx = f.free[n-1]
		f.free = f.free[:n-1]
	} else {
		f.slab = append(f.slab, slot{})
		idx = uint32(len(f.slab) - 1)
	}
	f.slab[idx] = slot{key: key}
	f.index[key] = idx
	return idx
}

func (f *FSM) remove(idx uint32) {
	delete(f.index, f.slab[idx].key)
	f.slab[idx] = slot{}
	f.free = append(f.free, idx)
}

// Window is one stored window as a peek reports it.
type Window struct {
	Start    int64
	Count    int64
	WindowMs int64
}

// Lookup returns the stored window of (policy, client), which may have
// lapsed but not yet been expired, and the applied time and index it was read
// at. ok is false when no window is stored.
func (f *FSM) Lookup(policy, client string) (w Window, ok bool, appliedNow int64, appliedIndex uint64) {
	key := appendKey(make([]byte, 0, 1+len(policy)+len(client)), []byte(policy), []byte(client))
	f.mu.RLock()
	defer f.mu.RUnlock()
	if idx, found := f.index[string(key)]; found {
		s := f.slab[idx]
		w, ok = Window{Start: s.start, Count: s.count, WindowMs: s.windowMs}, true
	}
	return w, ok, f.lastNow, f.appliedIndex
}

// Nodes returns the replicated node metadata.
func (f *FSM) Nodes() map[string]Node {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make(map[string]Node, len(f.nodes))
	for k, v := range f.nodes {
		out[k] = v
	}
	return out
}

// Node returns one node's metadata.
func (f *FSM) Node(id string) (Node, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	n, ok := f.nodes[id]
	return n, ok
}

// Stats is a cheap summary for status pages and metrics.
type Stats struct {
	StoredWindows int
	AppliedIndex  uint64
	AppliedNow    int64
	Halted        error
}

// Stats returns the FSM's counters.
func (f *FSM) Stats() Stats {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return Stats{StoredWindows: len(f.index), AppliedIndex: f.appliedIndex, AppliedNow: f.lastNow, Halted: f.halted}
}

// Digest summarizes the replicated state at the applied index it returns.
// Two replicas at the same index must report the same digest. Windows that
// have lapsed by the applied time are left out, so how far lazy expiry has
// got does not matter.
func (f *FSM) Digest() (digest uint64, appliedIndex uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var sum uint64
	var buf []byte
	for i := range f.slab {
		s := &f.slab[i]
		if s.key == "" || s.start+s.windowMs <= f.lastNow {
			continue
		}
		buf = binary.AppendUvarint(buf[:0], uint64(len(s.key)))
		buf = append(buf, s.key...)
		buf = binary.AppendVarint(buf, s.start)
		buf = binary.AppendVarint(buf, s.count)
		buf = binary.AppendVarint(buf, s.windowMs)
		sum += hash64(buf) // order-independent: slab order differs between replicas
	}
	ids := make([]string, 0, len(f.nodes))
	for id := range f.nodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	h := fnv.New64a()
	binary.Write(h, binary.BigEndian, sum)
	binary.Write(h, binary.BigEndian, f.lastNow)
	for _, id := range ids {
		n := f.nodes[id]
		io.WriteString(h, n.ID+"\x00"+n.RaftAddr+"\x00"+n.HTTPAddr+"\x00")
	}
	return h.Sum64(), f.appliedIndex
}

// hash64 is FNV-1a, written out so the per-window loop of Digest does not
// allocate a hasher per window.
func hash64(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}
