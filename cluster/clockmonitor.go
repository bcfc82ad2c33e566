package cluster

import (
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// clockMonitor keeps this node's latest reading of each peer's clock and
// judges its own clock against them (CockroachDB's RemoteClockMonitor is
// the model). It does no I/O and reads the time only through now, so a
// test drives it with readings and a fake clock; clockcheck.go takes the
// readings and acts on the verdict.
type clockMonitor struct {
	self  string
	maxMs int64 // MaxClockOffset
	now   func() time.Time
	// wallMs, when set, is this node's wall clock as it reads peers'
	// (with the testing skew): a reading taken before this node's own
	// clock stepped is corrected by the step (wall against monotonic
	// since the reading). Without it a node whose clock just stepped 20 s
	// still counted the readings of a peer it could no longer reach (a
	// killed leader) as agreeing, and could win the election (issue 34).
	wallMs func() int64

	mu      sync.Mutex
	offsets map[string]peerOffset
}

type peerOffset struct {
	offsetMs int64 // peer minus this node
	boundMs  int64 // half the round trip
	at       time.Time
	wallAt   int64 // wallMs when recorded
}

func newClockMonitor(self string, maxOffset time.Duration, now func() time.Time) *clockMonitor {
	return &clockMonitor{self: self, maxMs: maxOffset.Milliseconds(), now: now, offsets: map[string]peerOffset{}}
}

// record keeps a reading of id's clock: its offset from this node's and
// the reading's error bound (half the round trip).
func (m *clockMonitor) record(id string, offsetMs, boundMs int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := peerOffset{offsetMs: offsetMs, boundMs: boundMs, at: m.now()}
	if m.wallMs != nil {
		o.wallAt = m.wallMs()
	}
	m.offsets[id] = o
}

// offset is a reading's offset now: as recorded, less how far this
// node's wall clock moved against its monotonic clock since.
func (m *clockMonitor) offset(o peerOffset) int64 {
	if m.wallMs == nil {
		return o.offsetMs
	}
	stepped := (m.wallMs() - o.wallAt) - m.now().Sub(o.at).Milliseconds()
	return o.offsetMs - stepped
}

// usable reports whether a reading is recent and agrees with this node's
// clock within the bound.
func (m *clockMonitor) usable(o peerOffset) (recent, agrees bool) {
	recent = m.now().Sub(o.at) <= clockReadingTTL
	return recent, recent && abs(m.offset(o))-o.boundMs <= m.maxMs
}

// clockVerdict is a judgement of this node's clock.
type clockVerdict struct {
	// skewed: a voter that a majority of the voters (itself included)
	// does not confirm; it must not lead. Missing and stale readings
	// count against it.
	skewed   bool
	agreeing []string // sorted
	voters   int
	quorum   int
	// estimateMs is this node's offset from the median peer, when any
	// peer's reading is recent (haveEstimate).
	estimateMs   int64
	haveEstimate bool
}

// judge counts the voters whose recent reading agrees with this node's
// clock and forgets the readings of servers that are no longer voters.
func (m *clockMonitor) judge(voters map[string]bool) clockVerdict {
	v := clockVerdict{voters: len(voters), quorum: len(voters)/2 + 1, agreeing: []string{}}
	if voters[m.self] {
		v.agreeing = append(v.agreeing, m.self)
	}
	m.mu.Lock()
	var offs []int64
	for id, o := range m.offsets {
		if !voters[id] {
			delete(m.offsets, id)
			continue
		}
		recent, agrees := m.usable(o)
		if !recent {
			continue
		}
		offs = append(offs, m.offset(o))
		if agrees {
			v.agreeing = append(v.agreeing, id)
		}
	}
	m.mu.Unlock()
	if len(offs) > 0 {
		slices.Sort(offs)
		v.estimateMs, v.haveEstimate = -offs[len(offs)/2], true
	}
	slices.Sort(v.agreeing)
	v.skewed = voters[m.self] && len(v.agreeing) < v.quorum
	return v
}

// best is the voter among servers (not this node) with a recent reading
// that agrees with this node's clock, closest to the peers' median
// (medianMs, as an offset from this node).
func (m *clockMonitor) best(servers []raft.Server, medianMs int64) (raft.Server, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var best raft.Server
	bestDist := int64(-1)
	for _, s := range servers {
		o, ok := m.offsets[string(s.ID)]
		if s.ID == raft.ServerID(m.self) || s.Suffrage != raft.Voter || !ok {
			continue
		}
		if _, agrees := m.usable(o); !agrees {
			continue
		}
		if d := abs(m.offset(o) - medianMs); bestDist < 0 || d < bestDist {
			best, bestDist = s, d
		}
	}
	return best, bestDist >= 0
}

// peerSkewed reports whether id's latest reading is off by more than the
// maximum from this node's clock, and by how much.
func (m *clockMonitor) peerSkewed(id string) (bool, int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.offsets[id]
	if !ok {
		return false, 0
	}
	off := m.offset(o)
	return abs(off)-o.boundMs > m.maxMs, off
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
