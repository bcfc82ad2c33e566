package cluster

import (
	"errors"
	"testing"
	"time"
)

// neverFuture is a raft future raft never resolves, as after a shutdown
// that came between commit and apply.
type neverFuture struct{ block chan struct{} }

func (f neverFuture) Error() error { <-f.block; return nil }

// A waiter on a future raft never resolves gives up when the node closes
// instead of holding Close (and the process) forever; a resolved future
// still gives its own answer.
func TestAwaitFutureGivesUpWhenTheNodeCloses(t *testing.T) {
	stop := make(chan struct{})
	f := neverFuture{block: make(chan struct{})}
	defer close(f.block)
	got := make(chan error, 1)
	go func() { got <- awaitFuture(f, stop) }()
	select {
	case err := <-got:
		t.Fatalf("returned %v before the node closed", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(stop)
	select {
	case err := <-got:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("after close: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("still waiting 5 s after the node closed")
	}

	want := errors.New("leadership lost")
	if err := awaitFuture(resolved{want}, make(chan struct{})); err != want {
		t.Fatalf("resolved future: %v, want its own error", err)
	}
}

type resolved struct{ err error }

func (f resolved) Error() error { return f.err }
