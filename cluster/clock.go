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
	// quiet is how long grants are refused before a catch-up step, so a
	// grant stamped before the refusal has applied or failed.
	quiet time.Duration
	// debugOffset (ms) skews the wall clock; testing only.
	debugOffset atomic.Int64

	mu      sync.Mutex
	term    uint64
	stampNs int64
	stampAt time.Duration
	applied timeMark
	// The last clock judgment: whether a majority confirmed the wall
	// clock, and both clocks when it did.
	confirmed   bool
	judgedWall  int64
	judgedAt    time.Duration
	catchingUp  bool
	catchUpFrom time.Duration
}

func (c *leaderClock) init(src clockSource, maxOffset, quiet time.Duration) {
	c.src, c.maxOffsetNs, c.quiet = src, maxOffset.Nanoseconds(), quiet
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

// confirm records a clock judgment: ok when a majority of the voters
// agree with this node's wall clock, as it read wall at monotonic at.
func (c *leaderClock) confirm(ok bool, wall int64, at time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.confirmed, c.judgedWall, c.judgedAt = ok, wall, at
}

// stamp is the time of the next entry of term. ready: this node has
// applied everything earlier leaders committed (its barrier); grantsUntil
// reads the latest grant expiry of the state machine. Errors mean stamp
// nothing (not counted): the clock is not confirmed or stepped since, or
// a new leader has not applied any time yet.
func (c *leaderClock) stamp(term uint64, ready bool, grantsUntil func() int64) (int64, error) {
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
	if term != c.term {
		switch {
		case c.applied.set:
			// Continue from the applied time plus the time since it was
			// applied here: a follower applies an entry after it was
			// stamped, so this never runs ahead of the old leader's clock.
			c.stampNs = c.applied.nowMs*1e6 + (m - c.applied.at).Nanoseconds()
		case !ready:
			return 0, errClockNotReady
		default:
			// The cluster never applied a time (a new cluster): start at
			// this confirmed clock.
			c.stampNs = wallNs
		}
		c.term, c.stampAt, c.catchingUp = term, m, false
		return c.stampNs / 1e6, nil
	}
	dt := m - c.stampAt
	s := c.stampNs + dt.Nanoseconds()
	// The state machine's offset for this term is known once one of its
	// entries applied; until then cluster time is s (or later: the
	// offset only adds).
	known := c.applied.set && c.applied.term == term
	var offNs int64
	if known {
		offNs = c.applied.offsetMs * 1e6
	}
	behind := wallNs - (s + offNs)
	switch {
	case behind > c.maxOffsetNs && known && ready:
		if !c.catchingUp {
			c.catchingUp, c.catchUpFrom = true, m
		}
		if m-c.catchUpFrom >= c.quiet && grantsUntil()*1e6 <= s+offNs {
			s += behind // no holder can still spend: catch up at once
			c.catchingUp = false
		} else {
			s += slew(dt, behind)
		}
	default:
		if behind <= c.maxOffsetNs {
			c.catchingUp = false
		}
		s += slew(dt, behind)
	}
	c.stampNs, c.stampAt = s, m
	return s / 1e6, nil
}

// slew is the correction toward the wall clock over dt: at most slewPPM
// of dt either way, and never past the difference.
func slew(dt time.Duration, diffNs int64) int64 {
	lim := dt.Nanoseconds() * slewPPM / 1_000_000
	return max(-lim, min(lim, diffNs))
}

// grantsPaused reports that cluster time is waiting to catch up, so no
// new grant may be written (a grant outstanding would hold the step back).
func (c *leaderClock) grantsPaused() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.catchingUp
}

// clusterNowMs estimates cluster time now: the applied time plus the
// monotonic time since it was applied here (the wall clock before any).
func (c *leaderClock) clusterNowMs() int64 {
	m := c.src.Mono()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.applied.set {
		return c.src.WallMs()
	}
	return c.applied.nowMs + (m - c.applied.at).Milliseconds()
}

// wallNowMs is this node's wall clock as its peers see it.
func (c *leaderClock) wallNowMs() int64 { return c.src.WallMs() }
