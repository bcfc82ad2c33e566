// Package fsm is rlnode's raft.FSM: the replicated policy table and the
// state of every (policy, client) key, changed only by applying log entries
// with the window package's pure algorithms.
//
// Everything Apply needs is in the entry or the replicated state (the
// leader's now, the policy table), so every replica reaches the same state.
package fsm

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/policy"
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
	// ExpireBudget bounds how many lapsed keys one Apply deletes, so a
	// burst of expiries cannot stall an entry. Zero means 256.
	ExpireBudget int
}

// limState is one limit's state of a key, with the window length it was
// written for: after a policy change a limit keeps the state of the old
// limit with the same window (a policy's limits have distinct windows).
type limState struct {
	s        window.State
	windowMs int64
}

// slot is one key's state. Slots live in a slab indexed from the key map so
// the hot path updates them in place without allocating.
type slot struct {
	key string
	// exp is when the state stops mattering (the latest of its limits'
	// window.ExpiresAt); from then on the key decides as never seen.
	exp int64
	// epoch is the incarnation of the policy the state was written under:
	// deleting a policy kills its keys without visiting them.
	epoch uint32
	alg   window.Algorithm
	n     uint8 // limits held: first, then (*more)[:n-1]
	first limState
	// more holds limits 2..n, allocated to size for multi-limit policies
	// only (a pointer keeps the slot of a one-limit key small).
	more *[]limState
}

// newSlab is the FSM's slot store: a copied chunk gets its own arrays of
// extra limits, so no write reaches a snapshot's view through them.
func newSlab() cowSlab[slot] {
	return cowSlab[slot]{deep: func(s *slot) {
		if s.more != nil {
			m := slices.Clone(*s.more)
			s.more = &m
		}
	}}
}

func (s *slot) state(i int) *limState {
	if i == 0 {
		return &s.first
	}
	return &(*s.more)[i-1]
}

// tablePolicy is a policy of the replicated table, converted once for the
// hot path. It is replaced, never changed, so readers may keep it.
type tablePolicy struct {
	p      policy.Policy
	alg    window.Algorithm
	limits []window.Limit
	epoch  uint32
}

// FSM implements raft.FSM.
type FSM struct {
	cfg Config

	mu    sync.RWMutex
	index map[string]uint32
	slab  cowSlab[slot] // copy on write, so Snapshot is cheap
	free  []uint32
	heap  expiryHeap
	nodes map[string]Node

	// The policy table. nextEpoch is the epoch the next created policy
	// gets; every delete moves it on, so no later policy of any name can
	// revive a deleted one's keys. seeded is set by the first policy entry.
	policies  map[string]*tablePolicy
	nextEpoch uint32
	seeded    bool
	// tableVersion moves on whenever the table may have changed; readers
	// that derive something from the table (the gRPC service's descriptor
	// tree) rebuild when it moves. Local to this node, not state.
	tableVersion atomic.Uint64
	// view is the table as of a version, for lock-free lookups (Policy);
	// viewMu serialises its builds.
	view   atomic.Pointer[policyView]
	viewMu sync.Mutex
	// Outstanding lease grants per key (lease.go), sorted by expiry, and
	// the heap of their expiries.
	grants    map[string][]grant
	grantHeap grantHeap
	// Live concurrency permits per key, oldest first (permit.go), the key
	// of each permit id, and the heap of their expiries (key, index).
	permits    map[string][]permit
	permitKey  map[string]string
	permitHeap permitDues
	// A region's slices of its parent's global budgets (slice.go); not
	// in snapshots (a slice is spent only in the term that wrote it).
	slices    map[string]*sliceKey
	sliceUndo []sliceUndo
	// maxPermits bounds the permits stored (MaxPermits; tests lower it,
	// not state: every replica runs with the same bound).
	maxPermits int
	// Reservations by id (reservation.go) and the heap of their expiries
	// (the id in key).
	reservations    map[string]*reservation
	reservationHeap grantHeap
	// counts of permits and reservations, kept on apply (budgetcounts.go).
	counts budgetCounts
	// calls counts the stored per-call keys (call.go; derived, not state).
	calls callCounts
	// sweepLeft slots remain to visit from sweepPos after a delete.
	sweepLeft, sweepPos int

	// Time: lastNow is the clamped time of the last applied hits entry;
	// term and offset implement the per-term catch-up of DESIGN.md.
	lastNow int64
	term    uint64
	offset  int64
	// grantsUntil is the latest expiry of any grant made or restored
	// (never lowered by returns): until the applied time passes it, a
	// holder may still be spending. Derived, not state: the leader's
	// clock reads it before it lets cluster time catch up (GrantsUntil).
	grantsUntil int64

	appliedIndex uint64
	halted       error

	// Scratch reused across Apply calls (raft applies serially).
	views []hitView
	key   []byte
	undo  []undoRec
	next  [policy.MaxLimits]window.State
	last  *tablePolicy // lookupPolicy's cache, valid within one hits entry
}

// New returns an empty FSM.
func New(cfg Config) *FSM {
	if cfg.ExpireBudget <= 0 {
		cfg.ExpireBudget = 256
	}
	f := &FSM{cfg: cfg, maxPermits: MaxPermits}
	f.reset()
	return f
}

func (f *FSM) reset() {
	f.index = make(map[string]uint32)
	f.slab, f.free, f.heap = newSlab(), nil, nil
	f.nodes = make(map[string]Node)
	f.grants, f.grantHeap = make(map[string][]grant), nil
	f.permits, f.permitKey, f.permitHeap = make(map[string][]permit), make(map[string]string), nil
	f.reservations, f.reservationHeap = make(map[string]*reservation), nil
	f.counts = newBudgetCounts()
	f.policies = make(map[string]*tablePolicy)
	f.calls = callCounts{}
	f.tableVersion.Add(1)
	f.nextEpoch, f.seeded, f.sweepLeft, f.sweepPos = 0, false, 0, 0
	f.lastNow, f.term, f.offset, f.appliedIndex = 0, 0, 0, 0
	f.grantsUntil = 0
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
	if err := VerifyChecksum(l); err != nil {
		return f.halt(err)
	}
	var res any
	var err error
	switch l.Data[0] {
	case EntryHits:
		return f.applyHits(l)
	case EntrySetNode:
		var n Node
		if n, err = decodeSetNode(l.Data); err == nil {
			f.nodes[n.ID] = n
		}
	case EntryRemoveNode:
		var id string
		if id, err = decodeRemoveNode(l.Data); err == nil {
			delete(f.nodes, id)
		}
	case EntrySetPolicies:
		res, err = f.applySetPolicies(l.Data)
	case EntryDeletePolicy:
		res, err = f.applyDeletePolicy(l.Data)
	case EntryResetKey:
		res, err = f.applyResetKey(l.Data)
	case EntryGrant:
		return f.applyGrant(l)
	case EntryReturn:
		return f.applyReturn(l)
	case EntryCounter:
		res, err = f.applyCounter(l)
	case EntryPermit:
		return f.applyPermit(l)
	case EntryReservation:
		return f.applyReservation(l)
	case EntrySlices:
		return f.applySlices(l)
	case EntryCalls:
		return f.applyCalls(l)
	default:
		if l.Data[0]&IgnoreUnknown != 0 {
			return nil
		}
		return f.halt(fmt.Errorf("%w: unknown entry type %d at index %d (is this node older than the leader?)", ErrCorrupt, l.Data[0], l.Index))
	}
	if err != nil {
		return f.halt(fmt.Errorf("index %d: %w", l.Index, err))
	}
	return res
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

// TimeMark is the state machine's clock: the applied time, the term of
// the last timed entry and that term's offset (see clock).
type TimeMark struct {
	Term   uint64
	Now    int64
	Offset int64
}

// TimeMark reports the applied time with its term and offset; the node
// reads it after each entry to continue cluster time from it when it
// leads (cluster/clock.go).
func (f *FSM) TimeMark() TimeMark {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return TimeMark{Term: f.term, Now: f.lastNow, Offset: f.offset}
}

// GrantsUntil is the latest expiry (FSM time) of any lease grant this
// state machine made or restored: until the applied time passes it a
// holder may still be spending units, so cluster time must not step.
func (f *FSM) GrantsUntil() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.grantsUntil
}

// appendKey builds the map key: a length byte for the policy keeps
// (policy, client) pairs unambiguous.
func appendKey(dst, policy, client []byte) []byte {
	dst = append(dst, byte(len(policy)))
	dst = append(dst, policy...)
	return append(dst, client...)
}

func policyOf(key string) string { return key[1 : 1+int(key[0])] }

// epochOf is the epoch a key of the named policy is written under now: the
// policy's own, or for a policy not in the table (only version-1 entries
// write those) the epoch it would get if created next.
func (f *FSM) epochOf(name string) uint32 {
	if isCallPolicy(name) {
		return callEpoch // per-call keys outlive policy deletes (call.go)
	}
	if p := f.policies[name]; p != nil {
		return p.epoch
	}
	return f.nextEpoch
}

// alive reports whether a stored key still affects decisions at now. Once
// false it stays false: time only moves on and epochs never come back.
func (f *FSM) alive(s *slot, now int64) bool {
	return s.key != "" && s.exp > now && s.epoch == f.epochOf(policyOf(s.key))
}

func (f *FSM) insert(key string) uint32 {
	var idx uint32
	if n := len(f.free); n > 0 {
		idx = f.free[n-1]
		f.free = f.free[:n-1]
	} else {
		idx = f.slab.Append()
	}
	*f.slab.Mut(idx) = slot{key: key}
	f.index[key] = idx
	return idx
}

func (f *FSM) remove(idx uint32) {
	f.callRemoved(f.slab.At(idx))
	delete(f.index, f.slab.At(idx).key)
	*f.slab.Mut(idx) = slot{}
	f.free = append(f.free, idx)
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
	Policies      int
	Seeded        bool
	AppliedIndex  uint64
	AppliedNow    int64
	Halted        error
}

// Stats returns the FSM's counters.
func (f *FSM) Stats() Stats {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return Stats{StoredWindows: len(f.index), Policies: len(f.policies), Seeded: f.seeded,
		AppliedIndex: f.appliedIndex, AppliedNow: f.lastNow, Halted: f.halted}
}
