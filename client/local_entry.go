package client

import (
	"sync"
	"time"
)

// grantSlots is how many grants one key holds at once: the one being spent,
// a prefetched one, and one from the next window.
const grantSlots = 3

// slot is one grant being spent. g.Units is what is left of it.
type slot struct {
	g Grant
	// The deadline, margin taken off, on both clocks: it is over when
	// either says so.
	mono, wall int64
}

func (s *slot) usable(t stamp) bool { return s.g.Units > 0 && t.mono < s.mono && t.wall < s.wall }

// entry is one key's state in a Local.
type entry struct {
	mu    sync.Mutex
	slots [grantSlots]slot

	hot, dead bool
	recent    int   // hits while cold, within CoolAfter of each other
	lastUse   int64 // monotonic ns of the last hit

	// Sizing the next grant: units spent since the last fetch started,
	// and when it started.
	since, spent int64
	validFor     int64 // the newest grant's validity, ns
	last         Grant // the newest grant's limit, window and reset

	// A spent budget: refuse locally until refusedUntil, telling callers
	// to retry at retryAt.
	refusedUntil, retryAt int64

	fetch chan struct{} // closed when the grant in flight is installed
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
// be spent. ok is false when the cluster must be asked. It neither
// allocates nor blocks on the network.
func (e *entry) decide(l *Local, now time.Time, policy, key string, n int64) (Result, bool) {
	t := l.stampOf(now)
	e.mu.Lock()
	if e.dead || !e.hot {
		e.mu.Unlock()
		return Result{}, false
	}
	e.lastUse = t.mono
	var have int64
	for i := range e.slots {
		if e.slots[i].usable(t) {
			have += e.slots[i].g.Units
		}
	}
	if have < n {
		if t.mono < e.refusedUntil {
			r := e.refused(l, t, policy, key)
			e.mu.Unlock()
			return r, true
		}
		e.mu.Unlock()
		return Result{}, false
	}
	// Spend the grants that end first.
	var from *slot
	for left := n; left > 0; {
		var s *slot
		for i := range e.slots {
			if e.slots[i].usable(t) && (s == nil || e.slots[i].mono < s.mono) {
				s = &e.slots[i]
			}
		}
		take := min(left, s.g.Units)
		s.g.Units -= take
		left -= take
		from = s
	}
	e.spent += n
	r := Result{Allowed: true, Policy: policy, Key: key, Limit: from.g.Limit, Window: from.g.Window,
		Remaining: have - n, ResetAt: from.g.ResetAt, WindowStart: from.g.WindowStart, ServedBy: l.servedBy}
	if e.fetch == nil && e.short(t, have-n) {
		if wait, want, ok := l.startPrefetch(e, t); ok {
			go l.prefetch(e, policy, key, want, wait)
		}
	}
	e.mu.Unlock()
	return r, true
}

// short reports whether the key should fetch its next grant now: fewer
// than half a grant's worth of units left, or the newest grant in its last
// third.
func (e *entry) short(t stamp, left int64) bool {
	if left*2 < e.last.Units {
		return true
	}
	var newest int64
	for i := range e.slots {
		if e.slots[i].usable(t) {
			newest = max(newest, e.slots[i].mono)
		}
	}
	return newest-t.mono < e.validFor/3
}

// startFetch marks a fetch in flight and sizes it: about what the key
// spent over one grant's lifetime at its recent rate, at least n.
func (e *entry) startFetch(l *Local, t stamp, n int64) (chan struct{}, int64) {
	want := min(l.cfg.MaxWant, 10)
	if elapsed := t.mono - e.since; e.validFor > 0 && elapsed > 0 {
		want = min(l.cfg.MaxWant, max(1, e.spent*e.validFor/elapsed))
	}
	want = max(want, n)
	e.since, e.spent = t.mono, 0
	e.fetch = make(chan struct{})
	return e.fetch, want
}

// install puts a fresh grant into a slot, or records a spent budget when
// it brought no units. It returns grants nobody will spend, to give back.
func (e *entry) install(l *Local, g Grant) []Grant {
	t := l.stampOf(l.now())
	if e.dead {
		return []Grant{g}
	}
	if g.Units == 0 {
		retry := g.RetryAfter
		if retry <= 0 {
			retry = l.cfg.Recheck
		}
		e.last.Limit, e.last.Window, e.last.ResetAt = g.Limit, g.Window, g.ResetAt
		e.retryAt = l.stampOf(g.Sent).mono + int64(retry)
		e.refusedUntil = t.mono + int64(min(retry, l.cfg.Recheck))
		return nil
	}
	valid := g.ValidFor - l.cfg.Margin
	if valid <= 0 {
		return []Grant{g}
	}
	sent := l.stampOf(g.Sent)
	// A free slot, else the one that ends first gives way.
	s := &e.slots[0]
	for i := range e.slots {
		c := &e.slots[i]
		if !c.usable(t) {
			s = c
			break
		}
		if c.mono < s.mono {
			s = c
		}
	}
	var back []Grant
	if s.usable(t) {
		back = append(back, s.g)
	}
	*s = slot{g: g, mono: sent.mono + int64(valid), wall: sent.wall + int64(valid)}
	e.refusedUntil = 0
	e.validFor = int64(g.ValidFor)
	e.last = g
	return back
}

// refused is a local refusal: the key's budget is spent as far as this
// holder knows.
func (e *entry) refused(l *Local, t stamp, policy, key string) Result {
	retry := time.Duration(e.retryAt - t.mono)
	if e.retryAt == 0 {
		retry = e.last.RetryAfter
	}
	if retry <= 0 {
		retry = time.Millisecond
	}
	var have int64
	for i := range e.slots {
		if e.slots[i].usable(t) {
			have += e.slots[i].g.Units
		}
	}
	return Result{Policy: policy, Key: key, Limit: e.last.Limit, Window: e.last.Window, Remaining: have,
		ResetAt: e.last.ResetAt, RetryAfter: retry, ServedBy: l.servedBy}
}

func (e *entry) idle(t stamp, coolAfter time.Duration) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.fetch == nil && t.mono-e.lastUse > int64(coolAfter)
}

// retire marks the entry dead (if idle, or always with all) and hands back
// the units it still held.
func (e *entry) retire(t stamp, coolAfter time.Duration, all bool) (bool, []Grant) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !all && (e.fetch != nil || t.mono-e.lastUse <= int64(coolAfter)) {
		return false, nil
	}
	e.dead = true
	var back []Grant
	for i := range e.slots {
		if e.slots[i].usable(t) {
			back = append(back, e.slots[i].g)
		}
		e.slots[i] = slot{}
	}
	return true, back
}
