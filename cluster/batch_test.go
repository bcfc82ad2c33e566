package cluster

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// fakeFlush records each batch the committer starts and holds it until
// the test releases it.
type fakeFlush struct {
	started chan []group
	release chan struct{}
}

func newFakeFlush() *fakeFlush {
	return &fakeFlush{started: make(chan []group, 16), release: make(chan struct{})}
}

func (f *fakeFlush) flush(reqs []group, _ []trace.SpanContext) func() []outcome {
	f.started <- reqs
	return func() []outcome {
		<-f.release
		outs := make([]outcome, len(reqs))
		for i, g := range reqs {
			outs[i].res = CheckResult{Allowed: true, ServedBy: g[0].Client}
		}
		return outs
	}
}

func (f *fakeFlush) next(t *testing.T) []group {
	t.Helper()
	select {
	case b := <-f.started:
		return b
	case <-time.After(10 * time.Second):
		t.Fatal("no batch started")
		return nil
	}
}

func one(client string) group { return group{{Policy: "p", Client: client, Cost: 1}} }

// waitQueued waits until n groups wait in the committer's queue.
func waitQueued(t *testing.T, g *groupCommit, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g.mu.Lock()
		k := len(g.queue)
		g.mu.Unlock()
		if k == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d groups queued, want %d", k, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// While a batch is in flight, new groups queue and leave together in the
// next batch, in arrival order, each answered with its own outcome.
func TestGroupCommitPacksQueuedGroups(t *testing.T) {
	f := newFakeFlush()
	g := newGroupCommit(512, 1, f.flush, nil)
	defer g.close()
	var wg sync.WaitGroup
	results := make([]outcome, 4)
	submit := func(i int, client string) {
		defer wg.Done()
		results[i] = g.submit(context.Background(), one(client))[0]
	}
	wg.Add(1)
	go submit(0, "a")
	if b := f.next(t); len(b) != 1 {
		t.Fatalf("first batch %v", b)
	}
	for i, c := range []string{"b", "c", "d"} {
		wg.Add(1)
		go submit(i+1, c)
		waitQueued(t, g, i+1) // in order
	}
	close(f.release)
	b := f.next(t)
	if len(b) != 3 || b[0][0].Client != "b" || b[2][0].Client != "d" {
		t.Fatalf("second batch %v, want b, c, d together", b)
	}
	wg.Wait()
	for i, want := range []string{"a", "b", "c", "d"} {
		if results[i].err != nil || results[i].res.ServedBy != want {
			t.Errorf("group %s got %+v", want, results[i])
		}
	}
}

// A batch carries at most maxBatch hits but never splits a group: a group
// larger than maxBatch leaves alone.
func TestGroupCommitNeverSplitsAGroup(t *testing.T) {
	f := newFakeFlush()
	close(f.release)
	g := newGroupCommit(3, 1, f.flush, nil)
	defer g.close()
	g.mu.Lock() // queue everything before the loop looks
	big := group{{Policy: "p", Client: "x", Cost: 1}, {Policy: "p", Client: "x", Cost: 1}, {Policy: "p", Client: "x", Cost: 1}, {Policy: "p", Client: "x", Cost: 1}}
	for _, r := range []group{one("a"), one("b"), big, one("c")} {
		g.queue = append(g.queue, &waiter{req: r, done: make(chan outcome, 1)})
	}
	g.mu.Unlock()
	g.wake <- struct{}{}
	var sizes []int
	for range 3 {
		b := f.next(t)
		sizes = append(sizes, hitCount(b))
	}
	if sizes[0] != 2 || sizes[1] != 4 || sizes[2] != 1 {
		t.Fatalf("batch sizes %v, want [2 4 1]", sizes)
	}
}

// A caller that gives up while its group is still queued withdraws it: it
// is certainly not counted and never reaches a batch. One that gives up
// after its group was taken cannot know: outcome unknown.
func TestGroupCommitCancelQueuedVersusTaken(t *testing.T) {
	f := newFakeFlush()
	g := newGroupCommit(512, 1, f.flush, nil)
	defer g.close()

	takenCtx, giveUpTaken := context.WithCancel(context.Background())
	taken := make(chan outcome, 1)
	go func() { taken <- g.submit(takenCtx, one("taken"))[0] }()
	f.next(t) // in flight, held

	queuedCtx, giveUpQueued := context.WithCancel(context.Background())
	queued := make(chan outcome, 1)
	go func() { queued <- g.submit(queuedCtx, one("queued"))[0] }()
	waitQueued(t, g, 1)

	giveUpQueued()
	if o := <-queued; !errors.Is(o.err, ErrNotCounted) || errors.Is(o.err, ErrOutcomeUnknown) {
		t.Fatalf("withdrawn while queued: %v, want not counted", o.err)
	}
	giveUpTaken()
	if o := <-taken; !errors.Is(o.err, ErrOutcomeUnknown) {
		t.Fatalf("gave up after the batch took it: %v, want outcome unknown", o.err)
	}

	close(f.release)
	later := make(chan outcome, 1)
	go func() { later <- g.submit(context.Background(), one("later"))[0] }()
	b := f.next(t)
	if len(b) != 1 || b[0][0].Client != "later" {
		t.Fatalf("next batch %v: the withdrawn group must not be in it", b)
	}
	if o := <-later; o.err != nil {
		t.Fatal(o.err)
	}
}

// Closing fails what is still queued as not counted, lets the batch in
// flight finish, and refuses new groups.
func TestGroupCommitClose(t *testing.T) {
	f := newFakeFlush()
	g := newGroupCommit(512, 1, f.flush, nil)
	inflight := make(chan outcome, 1)
	go func() { inflight <- g.submit(context.Background(), one("a"))[0] }()
	f.next(t)
	queued := make(chan outcome, 1)
	go func() { queued <- g.submit(context.Background(), one("b"))[0] }()
	waitQueued(t, g, 1)

	closed := make(chan struct{})
	go func() { g.close(); close(closed) }()
	if o := <-queued; !errors.Is(o.err, ErrNotCounted) || !errors.Is(o.err, ErrClosed) {
		t.Fatalf("queued at close: %v, want not counted, closed", o.err)
	}
	close(f.release)
	<-closed
	if o := <-inflight; o.err != nil {
		t.Fatalf("in flight at close: %v, want its own outcome", o.err)
	}
	if o := g.submit(context.Background(), one("c"))[0]; !errors.Is(o.err, ErrClosed) {
		t.Fatalf("submit after close: %v", o.err)
	}
}
