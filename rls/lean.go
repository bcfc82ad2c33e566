package rls

import (
	"context"
	"time"

	"github.com/rlnode/rlnode/cluster"
)

// call is one request's room, pooled by the server: its plan, the
// entries of its descriptors and the node's answer on the lean path. A
// request of a few descriptors with a few entries each, the usual shape,
// allocates none of it.
type call struct {
	planBuf [2]planned
	entries [8]entry
	used    int // entries handed out
	hits    [2]cluster.Hit
	one     cluster.OneResult
	dl      deadline
	hdr     headerItems // its buffers kept between calls
}

// newPlan returns n zeroed planned descriptors, from the call's room when
// they fit.
func (c *call) newPlan(n int) []planned {
	if n > len(c.planBuf) {
		return make([]planned, n)
	}
	p := c.planBuf[:n:n]
	clear(p)
	return p
}

// newEntries returns room for n entries, from the call's when it fits.
func (c *call) newEntries(n int) []entry {
	if c.used+n > len(c.entries) {
		return make([]entry, n)
	}
	e := c.entries[c.used : c.used+n : c.used+n]
	c.used += n
	return e
}

// getCall takes a call from the pool for a request that must end by
// deadline.
func (s *Server) getCall(ctx context.Context) *call {
	c := s.calls.Get().(*call)
	c.used = 0
	c.dl = deadline{parent: ctx, at: time.Now().Add(s.cfg.RequestTimeout)}
	return c
}

// putCall gives a call back once the response no longer reads its room
// (respond copies what it needs into the response). Its room is not
// cleared here: each part is reset where it is taken (newPlan, CheckOne,
// the entries plan writes whole), and clearing it twice cost about 5% of
// a leased request's CPU (write barriers on its pointers).
func (s *Server) putCall(c *call) {
	c.dl.stop()
	c.dl = deadline{}
	s.calls.Put(c)
}

// deadline is a request's time bound, a context made only when a path
// needs one: a hot leased descriptor is decided without a context or a
// timer, everything else within the same deadline as before.
type deadline struct {
	parent context.Context
	at     time.Time
	ctx    context.Context
	cancel context.CancelFunc
}

// context returns the request's context bounded by its deadline, made
// on the first call. Not safe for concurrent use: the request's own
// goroutine calls it before handing the context on.
func (d *deadline) context() context.Context {
	if d.ctx == nil {
		d.ctx, d.cancel = context.WithDeadline(d.parent, d.at)
	}
	return d.ctx
}

// left is the time until the deadline, at least a nanosecond (a zero
// timeout would mean none to CheckOne).
func (d *deadline) left() time.Duration { return max(time.Until(d.at), time.Nanosecond) }

func (d *deadline) stop() {
	if d.cancel != nil {
		d.cancel()
	}
}

// checkOne decides a request's one enforcing hit on the node's lean path
// (CheckOne), into c.one: a hot key of a leased policy from the node's
// lease, anything else through the log. It answers false when the lean
// path does not decide the hit as CheckAll would (an invalid hit, a cost
// the table shows can never be allowed, a concurrency policy), and the
// caller asks CheckAll, whose answer it has always given.
func (s *Server) checkOne(c *call, hit cluster.Hit) (cluster.CheckResult, bool, error) {
	if s.one == nil {
		return cluster.CheckResult{}, false, nil
	}
	vh, err := cluster.ValidateHit(hit.Policy, hit.Client, hit.Cost)
	if err != nil {
		return cluster.CheckResult{}, false, nil
	}
	res := &c.one
	if err := s.one.CheckOne(c.dl.parent, vh, c.dl.left(), res); err != nil {
		return cluster.CheckResult{}, true, err
	}
	if res.NeverAllowed || res.Known && res.Policy.IsConcurrency() && len(res.Hits) == 0 {
		return cluster.CheckResult{}, false, nil
	}
	return res.CheckResult, true, nil
}
