package cluster

import (
	"context"
	"sync"
)

// routines owns goroutines that run only in some state of the node (as
// leader), in the manner of Consul's lib/routine: each is started by name
// with its own context when the state begins and cancelled, and waited
// for, when it ends, so no loop has to ask "am I still leader?" each tick.
type routines struct {
	mu      sync.Mutex
	running map[string]*routine
}

type routine struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// start runs fn under name unless a routine of that name is running.
func (r *routines) start(parent context.Context, name string, fn func(ctx context.Context)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.running[name]; ok {
		return
	}
	if r.running == nil {
		r.running = map[string]*routine{}
	}
	ctx, cancel := context.WithCancel(parent)
	rt := &routine{cancel: cancel, done: make(chan struct{})}
	r.running[name] = rt
	go func() {
		defer close(rt.done)
		fn(ctx)
	}()
}

// isRunning reports whether a routine of that name runs.
func (r *routines) isRunning(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.running[name]
	return ok
}

// stopAll cancels every routine and waits until each has returned.
func (r *routines) stopAll() {
	r.mu.Lock()
	running := r.running
	r.running = nil
	r.mu.Unlock()
	for _, rt := range running {
		rt.cancel()
	}
	for _, rt := range running {
		<-rt.done
	}
}
