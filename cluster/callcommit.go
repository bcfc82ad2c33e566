package cluster

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/lease"
)

// callCommitter coalesces the calls requests that reach the leader while
// an entry is in flight into one entry per owner (group commit for
// gubernator's API, as the hit path's committer does for hits), so
// single-item callers share entries. It is flat combining: the caller
// that finds no flush running flushes everything queued, then hands the
// role to the first caller still queued; no goroutine is needed and no
// caller flushes for others for longer than one flush after its own
// answer.
type callCommitter struct {
	// log writes the entry on the leader, stamped by the leader clock;
	// id names this node in the answers; keys bound the stored keys.
	log  leaseLog
	id   string
	keys CallKeyBounds
	comb combiner
	// clocks and maxClockOffset set how long a grant of a GLOBAL key is
	// usable (usableMs), as Leases does for policies' grants.
	clocks         interface{ votersContinueTime() bool }
	maxClockOffset time.Duration
}

type callWaiter struct {
	req  CallsRequest
	done chan callDone // one message: the answer, or the flusher's role
}

type callDone struct {
	ans   CallsAnswer
	err   error
	flush bool // not an answer: this waiter flushes next
}

// submit decides req in the next entry of its owner and returns its
// share of the answer.
func (c *callCommitter) submit(req CallsRequest) (CallsAnswer, error) {
	return c.comb.submit(req, c.flush)
}

// combiner is the flat combining of calls requests that the leader's
// committer and a follower's batched hop (callforward.go) share: the
// caller that finds no flush running flushes everything queued, then
// hands the role to the first caller still queued.
type combiner struct {
	mu       sync.Mutex
	queue    []*callWaiter
	flushing bool
}

// submit queues req and returns its answer; flush must answer every
// waiter it is given.
func (c *combiner) submit(req CallsRequest, flush func([]*callWaiter)) (CallsAnswer, error) {
	w := &callWaiter{req: req, done: make(chan callDone, 1)}
	c.mu.Lock()
	c.queue = append(c.queue, w)
	if c.flushing {
		c.mu.Unlock()
		if d := <-w.done; !d.flush {
			return d.ans, d.err
		}
	} else {
		c.flushing = true
		c.mu.Unlock()
	}
	// This caller flushes; its own request is still queued.
	c.mu.Lock()
	batch := c.queue
	c.queue = nil
	c.mu.Unlock()
	flush(batch)
	c.mu.Lock()
	if len(c.queue) == 0 {
		c.flushing = false
	} else {
		c.queue[0].done <- callDone{flush: true}
	}
	c.mu.Unlock()
	d := <-w.done
	return d.ans, d.err
}

// flush writes the batch as entries of one owner each, at most
// fsm.MaxCallsPerEntry items (a request is never split), and answers
// every waiter. Requests with grants (a node's holder) go in entries of
// their own: those are stamped as grants (refused while cluster time
// catches up, counted in flight so it never steps under them), which
// must not refuse callers' items.
func (c *callCommitter) flush(batch []*callWaiter) {
	for len(batch) > 0 {
		owner, grants := batch[0].req.Owner, hasGrant(batch[0].req)
		var take, rest []*callWaiter
		items := 0
		for _, w := range batch {
			if w.req.Owner == owner && hasGrant(w.req) == grants && items+len(w.req.Items) <= fsm.MaxCallsPerEntry {
				take = append(take, w)
				items += len(w.req.Items)
			} else {
				rest = append(rest, w)
			}
		}
		c.apply(owner, grants, take)
		batch = rest
	}
}

func hasGrant(r CallsRequest) bool {
	for _, it := range r.Items {
		if it.Lease.Grant {
			return true
		}
	}
	return false
}

// apply writes one entry for the waiters' items and hands each its
// outcomes.
func (c *callCommitter) apply(owner string, grants bool, ws []*callWaiter) {
	var items []CallItem
	for _, w := range ws {
		items = append(items, w.req.Items...)
	}
	b := c.keys.orDefault()
	res, err := c.log.applyLease(grants, func(now int64) []byte {
		return fsm.EncodeCalls(fsm.CallsEntry{Now: now, Owner: owner, MaxKeys: b.Total, MaxKeysPerOwner: b.PerCredential, Items: items})
	})
	r, ok := res.(*fsm.CallsResult)
	if err == nil && (!ok || len(r.Items) != len(items)) {
		err = errors.Join(ErrOutcomeUnknown, fmt.Errorf("unexpected apply response %T", res))
	}
	if err == nil && grants {
		for i, it := range items {
			if it.Lease.Grant && r.Items[i].Units > 0 {
				r.Items[i].UsableMs = c.usableMs(r.Now, r.Items[i])
			}
		}
	}
	at := 0
	for _, w := range ws {
		d := callDone{err: err}
		if err == nil {
			d.ans = CallsAnswer{Now: r.Now, Items: r.Items[at : at+len(w.req.Items)], ServedBy: c.id}
		}
		at += len(w.req.Items)
		w.done <- d
	}
}

// usableMs is how long after sending its request a holder may spend a
// grant of a GLOBAL key (lease.UsableFor): its validity less the margin,
// and, while some voter may run a release that moves cluster time at a
// failover, less --max-clock-offset before the window's end (the grant's
// units belong to the window). 0: not usable.
func (c *callCommitter) usableMs(now int64, o CallOutcome) int64 {
	valid := time.Duration(o.Expiry-now) * time.Millisecond
	toEnd := time.Duration(0)
	if c.clocks == nil || !c.clocks.votersContinueTime() {
		toEnd = time.Duration(max(1, o.Reset+1-now)) * time.Millisecond
	}
	return max(lease.UsableFor(valid, false, toEnd, c.maxClockOffset).Milliseconds(), 0)
}
