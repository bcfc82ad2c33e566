package cluster

import (
	"sync"
	"sync/atomic"
	"time"
)

// leaderClock stamps log entries. It samples the wall clock once per term
// and advances with the monotonic clock from there, so an NTP step in the
// middle of a term changes nothing; the FSM clamps whatever it receives.
type leaderClock struct {
	mu   sync.Mutex
	term uint64
	base time.Time // carries a monotonic reading
	// debugOffset (ms) simulates a skewed clock; testing only.
	debugOffset atomic.Int64
}

func (c *leaderClock) nowMs(term uint64) int64 {
	c.mu.Lock()
	if term != c.term || c.base.IsZero() {
		c.term, c.base = term, time.Now()
	}
	base := c.base
	c.mu.Unlock()
	return base.UnixMilli() + time.Since(base).Milliseconds() + c.debugOffset.Load()
}

func (c *leaderClock) wallNowMs() int64 {
	return time.Now().UnixMilli() + c.debugOffset.Load()
}
