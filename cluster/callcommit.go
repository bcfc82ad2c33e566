package cluster

import (
	"errors"
	"fmt"
	"sync"

	"github.com/rlnode/rlnode/fsm"
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
// every waiter.
func (c *callCommitter) flush(batch []*callWaiter) {
	for len(batch) > 0 {
		owner := batch[0].req.Owner
		var take, rest []*callWaiter
		items := 0
		for _, w := range batch {
			if w.req.Owner == owner && items+len(w.req.Items) <= fsm.MaxCallsPerEntry {
				take = append(take, w)
				items += len(w.req.Items)
			} else {
				rest = append(rest, w)
			}
		}
		c.apply(owner, take)
		batch = rest
	}
}

// apply writes one entry for the waiters' items and hands each its
// outcomes.
func (c *callCommitter) apply(owner string, ws []*callWaiter) {
	var items []CallItem
	for _, w := range ws {
		items = append(items, w.req.Items...)
	}
	b := c.keys.orDefault()
	res, err := c.log.applyLease(false, func(now int64) []byte {
		return fsm.EncodeCalls(fsm.CallsEntry{Now: now, Owner: owner, MaxKeys: b.Total, MaxKeysPerOwner: b.PerCredential, Items: items})
	})
	r, ok := res.(*fsm.CallsResult)
	if err == nil && (!ok || len(r.Items) != len(items)) {
		err = errors.Join(ErrOutcomeUnknown, fmt.Errorf("unexpected apply response %T", res))
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
