package cluster

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// A routine starts once per name, runs until stopped, and stopAll returns
// only after it has returned.
func TestRoutinesStartOnceAndStopAndWait(t *testing.T) {
	var r routines
	var starts, running atomic.Int32
	fn := func(ctx context.Context) {
		starts.Add(1)
		running.Add(1)
		<-ctx.Done()
		time.Sleep(10 * time.Millisecond) // cleanup the owner waits for
		running.Add(-1)
	}
	r.start(context.Background(), "promoter", fn)
	r.start(context.Background(), "promoter", fn)
	if !r.isRunning("promoter") {
		t.Fatal("not running after start")
	}
	deadline := time.Now().Add(10 * time.Second)
	for running.Load() != 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	r.stopAll()
	if starts.Load() != 1 || running.Load() != 0 || r.isRunning("promoter") {
		t.Fatalf("starts %d, running %d after stopAll; want 1 and 0", starts.Load(), running.Load())
	}
	r.start(context.Background(), "promoter", fn) // a new term starts it again
	r.stopAll()
	if starts.Load() != 2 {
		t.Fatalf("starts %d, want 2", starts.Load())
	}
}
