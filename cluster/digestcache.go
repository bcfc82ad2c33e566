package cluster

import (
	"sync"
	"time"
)

// digestEvery is how often a status read may compute the state digest.
const digestEvery = time.Second

// digestCache bounds the state digest's cost on the read path: the digest
// is an O(state) pass under the state machine's read lock (every window,
// grant, permit and reservation), and GET /v1/status is public, so a
// caller asking it in a loop held the lock against every Apply. It is
// computed at most once per digestEvery, whatever the callers; the others
// get the last one with the index it was taken at (readers compare
// digest and index together, and poll).
type digestCache struct {
	mu            sync.Mutex
	at            time.Time
	digest, index uint64
}

func (c *digestCache) get(now time.Time, compute func() (digest, index uint64)) (uint64, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() || now.Sub(c.at) >= digestEvery || now.Before(c.at) {
		c.digest, c.index = compute()
		c.at = now
	}
	return c.digest, c.index
}
