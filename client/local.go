package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlnode/rlnode/lease"
)

// LocalConfig configures a Local.
type LocalConfig struct {
	// Holder names this application instance to the cluster (default: a
	// random id). Two instances must never share one: each spends its own
	// grants. The cluster scopes it by the token or client certificate
	// the Client presents.
	Holder string
	// HotAfter is how many hits a key needs within CoolAfter before it is
	// leased (default 3); colder keys are decided by a remote Check.
	HotAfter int
	// CoolAfter is how long a leased key may go without a hit before its
	// unused units go back to the cluster (default 2s).
	CoolAfter time.Duration
	// MaxWant caps the units asked for in one grant (default 100). A key
	// asks for about what it spent over one grant's lifetime.
	MaxWant int64
	// Lease is how long each grant is asked to last (default 2s; the
	// cluster may give less, e.g. at the end of a window). Longer leases
	// mean fewer round trips; units a holder that vanished was holding
	// are lost to everyone for up to this long.
	Lease time.Duration
	// Margin is taken off every grant's validity on top of the cluster's
	// own margin (0.1% of it plus 5 ms, already off validForMs); default 0.
	Margin time.Duration
	// MaxKeys bounds the keys tracked at once (default 10000); keys past
	// it are decided by a remote Check.
	MaxKeys int
	// Recheck bounds how long a key whose budget is spent is refused
	// locally before the cluster is asked again (default 250ms).
	Recheck time.Duration
}

func (c *LocalConfig) setDefaults() error {
	if c.Holder == "" {
		var b [12]byte
		if _, err := rand.Read(b[:]); err != nil {
			return fmt.Errorf("rlnode client: holder id: %w", err)
		}
		c.Holder = "go-" + hex.EncodeToString(b[:])
	}
	if len(c.Holder) > lease.MaxAppHolderLen {
		return fmt.Errorf("rlnode client: LocalConfig.Holder is %d bytes; at most %d", len(c.Holder), lease.MaxAppHolderLen)
	}
	if c.HotAfter == 0 {
		c.HotAfter = 3
	}
	if c.CoolAfter == 0 {
		c.CoolAfter = 2 * time.Second
	}
	if c.MaxWant == 0 {
		c.MaxWant = 100
	}
	if c.MaxKeys == 0 {
		c.MaxKeys = 10000
	}
	if c.Lease == 0 {
		c.Lease = lease.DefaultLease
	}
	if c.Recheck == 0 {
		c.Recheck = 250 * time.Millisecond
	}
	if c.HotAfter < 1 || c.CoolAfter < 0 || c.MaxWant < 1 || c.Margin < 0 || c.Lease < time.Millisecond || c.MaxKeys < 1 || c.Recheck < 0 {
		return fmt.Errorf("rlnode client: LocalConfig has a negative or zero setting: %+v", *c)
	}
	return nil
}

// Local decides hits on hot keys in this process, from units the cluster
// leased to it, and sends colder keys to the cluster as Check does. It
// never over-admits: leased units already count as spent in the cluster,
// and every decision checks the grant's deadline on this process's clock
// (so a process that was paused wakes up with nothing to spend). Only
// leased policies (consistency: leased) are leased; hits on strict
// policies always go through Check.
//
// When the cluster cannot be reached, units already held stay good until
// their deadline, never after; then hits get the error Check would return
// (and Middleware's fail mode applies).
//
// Local is safe for concurrent use. Close it to give unused units back.
type Local struct {
	c        *Client
	cfg      LocalConfig
	lcfg     lease.Config // the lease core's parameters (lease.AppConfig)
	clock    *lease.SystemClock
	servedBy string
	now      func() time.Time

	mu      sync.RWMutex
	keys    map[localKey]*entry // hot keys only
	tracker *lease.Tracker[localKey]
	strict  map[string]time.Time // policies found not leased, and when

	bgMu   sync.Mutex // orders starting background grants against Close
	closed atomic.Bool
	stop   chan struct{}
	wg     sync.WaitGroup // the janitor and background grants
}

type localKey struct{ policy, key string }

// NewLocal starts a Local over c (which it does not close).
func NewLocal(c *Client, cfg LocalConfig) (*Local, error) {
	if c == nil {
		return nil, errors.New("rlnode client: NewLocal needs a Client")
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	lcfg := lease.AppConfig(cfg.Lease)
	lcfg.MaxWant, lcfg.CoolAfter, lcfg.Recheck = cfg.MaxWant, cfg.CoolAfter, cfg.Recheck
	if err := lcfg.Validate(); err != nil {
		return nil, fmt.Errorf("rlnode client: %w", err)
	}
	clock := lease.NewSystemClock()
	l := &Local{c: c, cfg: cfg, lcfg: lcfg, clock: clock, servedBy: "local:" + cfg.Holder, now: time.Now,
		keys: map[localKey]*entry{}, strict: map[string]time.Time{}, stop: make(chan struct{}),
		tracker: lease.NewTracker[localKey](cfg.HotAfter, max(cfg.CoolAfter/2, time.Millisecond), cfg.MaxKeys, clock.Now())}
	l.wg.Add(1)
	go l.janitor()
	return l, nil
}

// Holder is the id this Local leases under.
func (l *Local) Holder() string { return l.cfg.Holder }

// Allow is AllowN with cost 1.
func (l *Local) Allow(ctx context.Context, policy, key string) (Result, error) {
	return l.AllowN(ctx, policy, key, 1)
}

// AllowN decides one hit of cost n (0 means 1) for key under policy, as
// Check does: a refusal is a Result with Allowed false, an error means no
// decision. A decision made here has ServedBy "local:<holder>" and
// Remaining is what this holder has left, not the whole cluster.
func (l *Local) AllowN(ctx context.Context, policy, key string, n int64) (Result, error) {
	if n == 0 {
		n = 1
	}
	if key == "" {
		return Result{}, &Error{kind: ErrInvalid, Detail: "key is empty"}
	}
	if n < 0 {
		return Result{}, &Error{kind: ErrInvalid, Detail: fmt.Sprintf("cost %d is negative", n)}
	}
	if policy == "" {
		policy = "default"
	}
	l.mu.RLock()
	e := l.keys[localKey{policy, key}]
	l.mu.RUnlock()
	if e != nil {
		if r, ok := e.decide(l, policy, key, n, true); ok {
			return r, nil
		}
	}
	return l.slow(ctx, policy, key, n, e == nil)
}

// slow decides a hit the held units could not: a remote Check for a cold
// key or a strict policy, else a grant fetched now.
func (l *Local) slow(ctx context.Context, policy, key string, n int64, demand bool) (Result, error) {
	if l.closed.Load() || l.isStrict(policy) {
		return l.c.Check(ctx, policy, key, n)
	}
	e, hot := l.track(policy, key)
	if !hot {
		return l.c.Check(ctx, policy, key, n)
	}
	for attempt := 0; ; attempt++ {
		if r, ok := e.decide(l, policy, key, n, demand && attempt == 0); ok {
			return r, nil
		}
		e.mu.Lock()
		t := l.now()
		if e.dead {
			e.mu.Unlock()
			return l.c.Check(ctx, policy, key, n)
		}
		if wait := e.fetch; wait != nil {
			e.mu.Unlock()
			select {
			case <-wait:
			case <-ctx.Done():
				return Result{}, &Error{kind: ErrNotCounted, cause: ctx.Err()}
			}
			if err := e.fetchError(wait); err != nil {
				// The fetch this caller waited for failed: the same
				// error the caller that started it gets, never a
				// refusal (the middleware's fail mode decides).
				if errors.Is(err, ErrNotLeased) || errors.Is(err, ErrTooManyGrants) || noSlice(err) {
					return l.c.Check(ctx, policy, key, n)
				}
				return Result{}, err
			}
			continue
		}
		if attempt > 0 {
			// A fresh grant still cannot pay for this hit: the window
			// has fewer units left than n. Refuse; nothing was spent.
			r := e.refused(l, l.clock.Of(t), policy, key)
			e.mu.Unlock()
			return r, nil
		}
		want, ok := e.k.Want(l.clock.Of(t), n)
		if !ok {
			// Backing off after a failed request: the cluster decides.
			e.mu.Unlock()
			return l.c.Check(ctx, policy, key, n)
		}
		wait := make(chan struct{})
		e.fetch = wait
		e.mu.Unlock()
		if err := l.fetch(ctx, e, policy, key, want, wait); err != nil {
			switch {
			case errors.Is(err, ErrNotLeased):
				l.markStrict(policy)
				return l.c.Check(ctx, policy, key, n)
			case errors.Is(err, ErrTooManyGrants), noSlice(err):
				return l.c.Check(ctx, policy, key, n)
			}
			return Result{}, err
		}
	}
}

// fetch asks for a grant and installs it in e; wait is closed when done.
func (l *Local) fetch(ctx context.Context, e *entry, policy, key string, want int64, wait chan struct{}) error {
	sent := l.now()
	g, err := l.c.Lease(ctx, policy, key, l.cfg.Holder, want, l.cfg.Lease)
	// The lease clock starts on Local's own clock, just before the
	// request (earlier than the Client's own reading).
	g.Sent = sent
	e.mu.Lock()
	back := e.installed(l, g, err)
	e.fetch = nil
	e.lastFetch, e.lastFetchErr = wait, err
	close(wait)
	e.mu.Unlock()
	l.giveBack(back)
	return err
}

// prefetch is a background fetch started by a decision that left the key
// short; Close waits for it.
func (l *Local) prefetch(e *entry, policy, key string, want int64, wait chan struct{}) {
	defer l.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), l.c.cfg.Timeout)
	defer cancel()
	if err := l.fetch(ctx, e, policy, key, want, wait); errors.Is(err, ErrNotLeased) {
		l.markStrict(policy)
	}
}

// startPrefetch registers a background fetch for e (whose lock the caller
// holds) unless Local is closing.
func (l *Local) startPrefetch(e *entry, t lease.Stamp) (chan struct{}, bool) {
	l.bgMu.Lock()
	defer l.bgMu.Unlock()
	if l.closed.Load() {
		e.k.Failed(t) // the core marked a request in flight: end it
		return nil, false
	}
	l.wg.Add(1)
	e.fetch = make(chan struct{})
	return e.fetch, true
}

// giveBack returns units nobody will spend (best effort: units not
// returned come back when their grant expires).
func (l *Local) giveBack(grants []lease.Grant[Grant]) {
	for _, g := range grants {
		ctx, cancel := context.WithTimeout(context.Background(), l.c.cfg.Timeout)
		_ = l.c.ReturnLease(ctx, g.Info, g.Left)
		cancel()
	}
}

// track counts a hit on a key that has no usable units and reports
// whether the key is hot (leased) now.
func (l *Local) track(policy, key string) (*entry, bool) {
	k := localKey{policy, key}
	t := l.clock.Of(l.now())
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.keys[k]; e != nil && !e.isDead() {
		return e, true
	}
	if !l.tracker.Hit(k, t) || len(l.keys) >= l.cfg.MaxKeys {
		return nil, false
	}
	l.tracker.Forget(k)
	e := &entry{k: lease.NewKey[Grant](&l.lcfg, t)}
	e.k.Demand(t, 1)
	l.keys[k] = e
	return e, true
}

const strictRecheck = 30 * time.Second

func (l *Local) isStrict(policy string) bool {
	l.mu.RLock()
	at, ok := l.strict[policy]
	l.mu.RUnlock()
	return ok && l.now().Sub(at) < strictRecheck
}

func (l *Local) markStrict(policy string) {
	l.mu.Lock()
	l.strict[policy] = l.now()
	l.mu.Unlock()
}

// janitor returns the units of keys that cooled down and forgets cold
// keys, until Close.
func (l *Local) janitor() {
	defer l.wg.Done()
	every := min(max(l.cfg.CoolAfter/2, 20*time.Millisecond), time.Second)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
			l.sweep(false)
		}
	}
}

// sweep retires cooled keys (every key when all is set) and gives their
// unused units back.
func (l *Local) sweep(all bool) {
	t := l.clock.Of(l.now())
	l.mu.RLock()
	var idle []localKey
	for k, e := range l.keys {
		if all || e.idle(t) {
			idle = append(idle, k)
		}
	}
	l.mu.RUnlock()
	var back []lease.Grant[Grant]
	for _, k := range idle {
		l.mu.Lock()
		e := l.keys[k]
		if e == nil {
			l.mu.Unlock()
			continue
		}
		retired, units := e.retire(t, all)
		if retired {
			delete(l.keys, k)
		}
		l.mu.Unlock()
		back = append(back, units...)
	}
	l.giveBack(back)
}

// Close stops background work and gives every unused unit back (within
// ctx). Decisions after Close go to the cluster as Check does.
func (l *Local) Close(ctx context.Context) error {
	l.bgMu.Lock()
	was := l.closed.Swap(true)
	l.bgMu.Unlock()
	if was {
		return nil
	}
	close(l.stop)
	l.wg.Wait()
	t := l.clock.Of(l.now())
	l.mu.Lock()
	var back []lease.Grant[Grant]
	for k, e := range l.keys {
		_, units := e.retire(t, true)
		back = append(back, units...)
		delete(l.keys, k)
	}
	l.mu.Unlock()
	var errs []error
	for _, g := range back {
		if err := l.c.ReturnLease(ctx, g.Info, g.Left); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// noSlice reports a grant refused because the region holds no slice of
// a global key right now (503 parent_unreachable, nothing granted): the
// cluster's check waits for a slice, so the hit goes there.
func noSlice(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == "parent_unreachable"
}
