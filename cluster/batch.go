package cluster

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"

	"github.com/rlnode/rlnode/fsm"
)

// hitReq is one hit as it enters the cluster: what the caller asked for.
// Apply resolves the policy from the replicated table.
type hitReq = fsm.Hit

// group is an all-or-nothing group of hits: the unit the batchers queue,
// the forwarding wire carries and one log entry decides at once.
type group []hitReq

func hitCount(gs []group) int {
	n := 0
	for _, g := range gs {
		n += len(g)
	}
	return n
}

// outcome is the fate of one group: a result or a *HitError.
type outcome struct {
	res CheckResult
	err error
}

// waiter is a queued group. state moves queued -> taken (the batch owns it)
// or queued -> cancelled (the caller gave up before it was taken, so it is
// certainly not counted).
type waiter struct {
	req group
	// from is the caller's span context, nil when tracing is off (a
	// pointer keeps the waiter in its allocation size class).
	from  *trace.SpanContext
	state atomic.Int32
	done  chan outcome
}

const (
	waiterQueued int32 = iota
	waiterTaken
	waiterCancelled
)

// flushFunc starts one batch and returns a function that waits for its
// outcomes (one per request, in order). The start half runs on the
// committer's loop, so batches start in queue order. from holds each
// request's caller span context when tracing is on, else nil.
type flushFunc func(reqs []group, from []trace.SpanContext) (wait func() []outcome)

// groupCommit turns concurrent hits into few batches: while maxInflight
// batches are running, new hits queue up and leave together in the next one.
type groupCommit struct {
	maxBatch int
	flush    flushFunc
	sem      chan struct{}
	tr       *tracer

	mu     sync.Mutex
	queue  []*waiter
	closed bool
	wake   chan struct{}
	stop   chan struct{}
	wg     sync.WaitGroup
}

func newGroupCommit(maxBatch, maxInflight int, flush flushFunc, tr *tracer) *groupCommit {
	g := &groupCommit{
		maxBatch: maxBatch, flush: flush, tr: tr,
		sem:  make(chan struct{}, maxInflight),
		wake: make(chan struct{}, 1),
		stop: make(chan struct{}),
	}
	g.wg.Add(1)
	go g.loop()
	return g
}

// submit queues groups together and waits for their outcomes. If ctx ends
// first, groups not yet taken are withdrawn (not counted) and the rest are
// reported as unknown.
func (g *groupCommit) submit(ctx context.Context, reqs ...group) []outcome {
	ws := make([]*waiter, len(reqs))
	for i, r := range reqs {
		ws[i] = g.waiterFor(ctx, r)
	}
	if !g.enqueue(ws...) {
		return failAll(len(reqs), notCounted(nil, ErrClosed))
	}
	out := make([]outcome, len(ws))
	for i, w := range ws {
		out[i] = w.await(ctx)
	}
	return out
}

// submitOne is submit of one group, without submit's two slices: the path
// of every single check.
func (g *groupCommit) submitOne(ctx context.Context, req group) outcome {
	w := g.waiterFor(ctx, req)
	if !g.enqueue(w) {
		return outcome{err: notCounted(nil, ErrClosed)}
	}
	return w.await(ctx)
}

func (g *groupCommit) waiterFor(ctx context.Context, req group) *waiter {
	return &waiter{req: req, from: g.tr.callerOf(ctx), done: make(chan outcome, 1)}
}

// enqueue queues waiters and wakes the loop; false when the batcher is
// closed (nothing was queued).
func (g *groupCommit) enqueue(ws ...*waiter) bool {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return false
	}
	g.queue = append(g.queue, ws...)
	g.mu.Unlock()
	select {
	case g.wake <- struct{}{}:
	default:
	}
	return true
}

// await waits for a queued waiter's outcome. If ctx ends first, a waiter
// not yet taken is withdrawn (not counted); a taken one is unknown.
func (w *waiter) await(ctx context.Context) outcome {
	select {
	case o := <-w.done:
		return o
	case <-ctx.Done():
		if w.state.CompareAndSwap(waiterQueued, waiterCancelled) {
			return outcome{err: notCounted(nil, fmt.Errorf("gave up before the hit was sent: %w", ctx.Err()))}
		}
		select {
		case o := <-w.done:
			return o
		default:
			return outcome{err: outcomeUnknown(fmt.Errorf("gave up waiting for the log: %w", ctx.Err()))}
		}
	}
}

func failAll(n int, err error) []outcome {
	out := make([]outcome, n)
	for i := range out {
		out[i].err = err
	}
	return out
}

func (g *groupCommit) loop() {
	defer g.wg.Done()
	for {
		select {
		case <-g.stop:
			return
		case <-g.wake:
		}
		for {
			// Wait for a free slot first: the hits that arrive meanwhile
			// are exactly what group commit packs together.
			select {
			case g.sem <- struct{}{}:
			case <-g.stop:
				return
			}
			batch := g.take()
			if len(batch) == 0 {
				<-g.sem
				break
			}
			reqs := make([]group, len(batch))
			var from []trace.SpanContext
			if g.tr != nil {
				from = make([]trace.SpanContext, len(batch))
			}
			for i, w := range batch {
				reqs[i] = w.req
				if from != nil && w.from != nil {
					from[i] = *w.from
				}
			}
			wait := g.flush(reqs, from)
			g.wg.Add(1)
			go func() {
				defer g.wg.Done()
				defer func() { <-g.sem }()
				outs := wait()
				for i, w := range batch {
					w.done <- outs[i]
				}
			}()
		}
	}
}

// take removes live waiters from the queue, up to maxBatch hits (but at
// least one group: a group is never split).
func (g *groupCommit) take() []*waiter {
	g.mu.Lock()
	defer g.mu.Unlock()
	var batch []*waiter
	i, hits := 0, 0
	for ; i < len(g.queue); i++ {
		w := g.queue[i]
		if len(batch) > 0 && hits+len(w.req) > g.maxBatch {
			break
		}
		if w.state.CompareAndSwap(waiterQueued, waiterTaken) {
			batch = append(batch, w)
			hits += len(w.req)
		}
	}
	n := copy(g.queue, g.queue[i:])
	clear(g.queue[n:])
	g.queue = g.queue[:n]
	return batch
}

// close stops the loop, waits for running batches and fails what is still
// queued as not counted.
func (g *groupCommit) close() {
	g.mu.Lock()
	g.closed = true
	rest := g.queue
	g.queue = nil
	g.mu.Unlock()
	close(g.stop)
	for _, w := range rest {
		if w.state.CompareAndSwap(waiterQueued, waiterTaken) {
			w.done <- outcome{err: notCounted(nil, ErrClosed)}
		}
	}
	g.wg.Wait()
}
