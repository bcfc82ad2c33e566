package client

import (
	"sync"

	"github.com/rlnode/rlnode/lease"
)

// entry is one hot key's state in a Local: the lease core's per-key state
// (grants by deadline, demand, sizing, refuse-until, cool-down) under the
// entry's own mutex, and the fetch callers wait on.
type entry struct {
	mu   sync.Mutex
	k    *lease.Key[Grant]
	dead bool
	// fetch is closed when the grant in flight is installed.
	fetch chan struct{}
	// The last fetch and how it failed (nil: it did not), for callers
	// that waited on it.
	lastFetch    chan struct{}
	lastFetchErr error
}

// fetchError is how the fetch that closed wait failed, if it did.
func (e *entry) fetchError(wait chan struct{}) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lastFetch == wait {
		return e.lastFetchErr
	}
	return nil
}

func (e *entry) isDead() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.dead
}

// decide spends n held units, or refuses while the key's budget is known to
// be spent. ok is false when the cluster must be asked. demand counts the
// hit toward the key's rate (once per hit). It neither allocates nor
// blocks on the network. The clock is read under the entry's lock, right
// before deciding (lease/DESIGN.md): a reading the caller took before
// waiting for the locks may be older than a deadline that passed
// meanwhile.
func (e *entry) decide(l *Local, policy, key string, n int64, demand bool) (Result, bool) {
	e.mu.Lock()
	t := l.clock.Of(l.now())
	if e.dead {
		e.mu.Unlock()
		return Result{}, false
	}
	if demand {
		e.k.Demand(t, n)
	}
	from, ok := e.k.Spend(t, n)
	if !ok {
		if e.k.Refusing(t) {
			r := e.refused(l, t, policy, key)
			e.mu.Unlock()
			return r, true
		}
		e.mu.Unlock()
		return Result{}, false
	}
	g := &from.Info
	r := Result{Allowed: true, Policy: policy, Key: key, Limit: g.Limit, Window: g.Window,
		Remaining: e.k.Available(t), ResetAt: g.ResetAt, WindowStart: g.WindowStart, ServedBy: l.servedBy}
	if e.fetch == nil {
		if want, ok := e.k.Want(t, 0); ok {
			if wait, ok := l.startPrefetch(e, t); ok {
				go l.prefetch(e, policy, key, want, wait)
			}
		}
	}
	e.mu.Unlock()
	return r, true
}

// refused is a local refusal: the key's budget is spent as far as this
// holder knows.
func (e *entry) refused(l *Local, t lease.Stamp, policy, key string) Result {
	last, _ := e.k.Last()
	retry := e.k.RetryAfter(t)
	if !e.k.Refusing(t) && last.RetryAfter > 0 {
		retry = last.RetryAfter // a fresh grant had fewer units than the hit
	}
	return Result{Policy: policy, Key: key, Limit: last.Limit, Window: last.Window, Remaining: e.k.Available(t),
		ResetAt: last.ResetAt, RetryAfter: retry, ServedBy: l.servedBy}
}

// installed ends a fetch: the grant (or the error) goes into the core,
// and what nobody will spend comes back to be returned.
func (e *entry) installed(l *Local, g Grant, err error) []lease.Grant[Grant] {
	t := l.clock.Of(l.now())
	switch {
	case err != nil:
		e.k.Failed(t)
	case e.dead:
		return []lease.Grant[Grant]{{ID: g.ID, Left: g.Units, Units: g.Units, Info: g}}
	case g.Units == 0:
		e.k.Exhausted(t, g.RetryAfter, g)
	default:
		return e.k.Installed(t, l.clock.Of(g.Sent), g.ID, g.Units, g.ValidFor-l.cfg.Margin, g)
	}
	return nil
}

func (e *entry) idle(t lease.Stamp) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.fetch == nil && e.k.Idle(t)
}

// retire marks the entry dead (if idle, or always with all) and hands back
// the units it still held.
func (e *entry) retire(t lease.Stamp, all bool) (bool, []lease.Grant[Grant]) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !all && (e.fetch != nil || !e.k.Idle(t)) {
		return false, nil
	}
	e.dead = true
	return true, e.k.Retire(nil)
}
