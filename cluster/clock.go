package cluster

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Cluster time follows elapsed time, never one node's wall clock
// (/work/shared/DESIGN.md, "Semantics"; the argument is in fsm/DESIGN.md,
// "Time"). The leader stamps each entry from the cluster time it last
// applied plus its own monotonic time since, so a leader change carries
// cluster time on at real rate instead of moving it to the new leader's
// wall clock. Cluster time approaches the leader's wall clock only by a
// slew of at most slewPPM, and only while a majority of the voters agree
// with that clock (the clock check) and it has not been stepped since
// they last did. The one exception is catching up after the whole
// cluster was down (cluster time then lags every clock by the outage):
// cluster time steps forward to the leader's confirmed wall clock, but
// only once no lease grant can still be spent (new grants are refused
// meanwhile), so no holder ever sees a window end early.

const (
	// slewPPM is the fastest cluster time moves toward the leader's wall
	// clock, in parts per million of elapsed time (both ways). With the
	// monotonic clock's own rate error (NTP: 500 ppm) it is what the
	// lease margin covers (lease.MarginPPM).
	slewPPM = 500
	// stepTolerance is how far the wall clock may have moved against the
	// monotonic clock since the last clock judgment before the leader
	// stops stamping until the next one: NTP slews 0.5 ms a second, so
	// anything larger is a step the judgment has not seen yet.
	stepTolerance = 50 * time.Millisecond
)

// errClockStepped: the wall clock stepped since the majority last
// confirmed it; the leader stamps nothing until it is judged again.
var errClockStepped = fmt.Errorf("the wall clock stepped since a majority last confirmed it: %w", ErrClockSkew)

// errClockNotReady: a new leader that has applied no time yet waits for
// its barrier (everything earlier leaders committed) before it stamps.
var errClockNotReady = errors.New("this leader has not applied the cluster's time yet")

// errCatchingUp refuses a grant while cluster time waits to catch up.
var errCatchingUp = errors.New("cluster time is catching up after an outage; no new lease grants until it has (hits go through the log)")

// clockSource is what the leader clock reads: a monotonic reading (time
// since an arbitrary origin; NTP never steps it) and the wall clock in
// Unix ms (what NTP and the testing hook step). Tests inject both.
type clockSource interface {
	Mono() time.Duration
	WallMs() int64
}

// systemClock is the process's clocks; offset (ms) is the testing-only
// skew of the wall clock (--debug-clock-offset, /debug/clock-offset).
type systemClock struct {
	origin time.Time
	offset *atomic.Int64
}

func (c systemClock) Mono() time.Duration { return time.Since(c.origin) }
func (c systemClock) WallMs() int64       { return time.Now().UnixMilli() + c.offset.Load() }

// timeMark is the latest applied cluster time: the state machine's
// clock (fsm.TimeMark) and the monotonic instant this node applied it.
type timeMark struct {
	set      bool
	term     uint64
	nowMs    int64
	offsetMs int64
	at       time.Duration
}

// leaderClock stamps log entries (see the top of this file). Stamps form
// a chain per term: stampNs is the last stamp in the entries' unit (the
// state machine adds its per-term offset, fsm.FSM.clock) and stampAt the
// monotonic instant it was taken.
type leaderClock struct {
	src         clockSource
	maxOffsetNs int64
	// debugOffset (ms) skews the wall clock; testing only.
	debugOffset atomic.Int64

	mu      sync.Mutex
	term    uint64
	stampNs int64
	stampAt time.Duration
	applied timeMark
	// The last clock judgment: whether a majority confirmed the wall
	// clock, and both clocks when it did.
	confirmed  bool
	judgedWall int64
	judgedAt   time.Duration
	// peer is the best lower bound of cluster time a peer reported (its
	// own estimate when this node read its clock), and when it was read.
	peer timeMark
	// catchingUp: cluster time lags the confirmed wall clock by more than
	// the bound; no new grant is stamped until it has stepped, which it
	// does once no grant is in flight (grantsInFlight) or outstanding.
	catchingUp     bool
	grantsInFlight int
}

func (c *leaderClock) init(src clockSource, maxOffset time.Duration) {
	c.src, c.maxOffsetNs = src, maxOffset.Nanoseconds()
}

// observe records the state machine's clock after an entry applied (or
// a snapshot was restored): where a term this node leads continues from.
func (c *leaderClock) observe(term uint64, nowMs, offsetMs int64) {
	if nowMs == 0 {
		return // no timed entry applied yet: the cluster has no time
	}
	at := c.src.Mono()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.applied.set && c.applied.term == term && c.applied.nowMs == nowMs {
		return // nothing timed applied since (keep the earlier instant)
	}
	c.applied = timeMark{set: true, term: term, nowMs: nowMs, offsetMs: offsetMs, at: at}
}

// observePeer records a peer's estimate of cluster time, read at
// monotonic at: the peer's estimate was taken before this node received
// it, so it is a lower bound like this node's own applied time. A node
// that replayed old entries at a restart learns from its peers how far
// cluster time has run since.
func (c *leaderClock) observePeer(nowMs int64, at time.Duration) {
	if nowMs <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.peer.set || nowMs-at.Milliseconds() > c.peer.nowMs-c.peer.at.Milliseconds() {
		c.peer = timeMark{set: true, nowMs: nowMs, at: at}
	}
}

// estimateNs is the best lower bound of cluster time at monotonic m:
// the applied time or a peer's estimate, plus the time since.
func (c *leaderClock) estimateNs(m time.Duration) (int64, bool) {
	var e int64
	ok := false
	for _, mk := range []timeMark{c.applied, c.peer} {
		if mk.set {
			if v := mk.nowMs*1e6 + (m - mk.at).Nanoseconds(); !ok || v > e {
				e, ok = v, true
			}
		}
	}
	return e, ok
}

// confirm records a clock judgment: ok when a majority of the voters
// agree with this node's wall clock, as it read wall at monotonic at.
func (c *leaderClock) confirm(ok bool, wall int64, at time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.confirmed, c.judgedWall, c.judgedAt = ok, wall, at
}

// stamp is the time of the next entry of term. ready: this node has
// applied everything earlier leaders committed (its barrier); grantsUntil
// reads the latest grant expiry of the state machine; grant: the entry
// is a lease grant (grantDone must follow once it applied or failed).
// Errors mean stamp nothing (not counted): the clock is not confirmed or
// stepped since, a new leader whose time lags its clock has not passed
// its barrier, or (a grant) cluster time waits to catch up.
func (c *leaderClock) stamp(term uint64, ready bool, grantsUntil func() int64, grant bool) (int64, error) {
	m, w := c.src.Mono(), c.src.WallMs()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.confirmed {
		return 0, ErrClockSkew
	}
	if drift := time.Duration(w-c.judgedWall)*time.Millisecond - (m - c.judgedAt); drift > stepTolerance || drift < -stepTolerance {
		return 0, errClockStepped
	}
	wallNs := w * 1e6
	// A step is safe only when no holder can still spend a grant: none
	// in flight, none outstanding at cluster time at.
	canStep := func(at int64) bool { return c.grantsInFlight == 0 && grantsUntil()*1e6 <= at }
	if term != c.term {
		// Continue from the applied time (or a peer's estimate) plus the
		// time since: a follower applies an entry after it was stamped,
		// so this never runs ahead of the old leader's clock.
		e, ok := c.estimateNs(m)
		if !ok || wallNs-e > c.maxOffsetNs {
			// No time yet (a new cluster) or far behind (the whole cluster
			// was down): after the barrier everything committed is
			// applied, so the state machine's time and grants are known
			// and the first stamp of the term may start at this clock.
			if !ready {
				return 0, errClockNotReady
			}
			if !ok || canStep(max(e, c.applied.nowMs*1e6)) {
				e = wallNs
			}
		}
		c.term, c.stampNs, c.stampAt = term, e, m
		c.catchingUp = wallNs-e > c.maxOffsetNs
	} else {
		dt := m - c.stampAt
		s := c.stampNs + dt.Nanoseconds()
		// The state machine's offset for this term is known once one of
		// its entries applied; until then cluster time is s (or later:
		// the offset only adds), and no step is taken.
		known := c.applied.set && c.applied.term == term
		var offNs int64
		if known {
			offNs = c.applied.offsetMs * 1e6
		}
		behind := wallNs - (s + offNs)
		c.catchingUp = behind > c.maxOffsetNs
		if c.catchingUp && known && ready && canStep(s+offNs) {
			s += behind // no holder can spend a grant: catch up at once
			c.catchingUp = false
		} else {
			s += slew(dt, behind)
		}
		c.stampNs, c.stampAt = s, m
	}
	if grant {
		if c.catchingUp {
			return 0, errCatchingUp
		}
		c.grantsInFlight++
	}
	return c.stampNs / 1e6, nil
}

// grantDone ends a grant stamped by stamp: it applied (the state machine
// knows its expiry) or failed.
func (c *leaderClock) grantDone() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.grantsInFlight--
}

// slew is the correction toward the wall clock over dt: at most slewPPM
// of dt either way, and never past the difference.
func slew(dt time.Duration, diffNs int64) int64 {
	lim := dt.Nanoseconds() * slewPPM / 1_000_000
	return max(-lim, min(lim, diffNs))
}

// grantsPaused reports that cluster time is waiting to catch up, so no
// new grant is written (a grant outstanding would hold the step back).
func (c *leaderClock) grantsPaused() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.catchingUp
}

// clusterNowMs estimates cluster time now: the applied time (or a
// peer's estimate) plus the monotonic time since; false before any.
func (c *leaderClock) clusterNowMs() (int64, bool) {
	m := c.src.Mono()
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.estimateNs(m)
	return e / 1e6, ok
}

// wallNowMs is this node's wall clock as its peers see it.
func (c *leaderClock) wallNowMs() int64 { return c.src.WallMs() }
