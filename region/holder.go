package region

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlnode/rlnode/client"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/lease"
	"github.com/rlnode/rlnode/policy"
)

// How the region's leader asks for slices (lease/DESIGN.md has the core
// these parameterise).
const (
	// maxKeys bounds the keys the holder tracks (the state machine's
	// bound on keys with slices is fsm.MaxSliceKeys).
	maxKeys = fsm.MaxSliceKeys
	// maxFetches bounds the slice requests in flight to the parent.
	maxFetches = 64
	// shareDiv: one request asks for at most limit/shareDiv units, so
	// the first region to ask at a window's start cannot take the whole
	// window while another region is about to ask.
	shareDiv = 4
	// callTimeout bounds one call to the parent.
	callTimeout = 3 * time.Second
)

// holderConfig is a region's: its round trip to the parent crosses
// regions (tens to hundreds of ms), so it asks early (half a second of
// demand ahead, or in a grant's last third) for a second of demand, and
// gives back after 3 s without a hit.
func holderConfig() lease.Config {
	return lease.Config{MinWant: 1, MaxWant: 1 << 40, Horizon: time.Second, PrefetchAhead: 500 * time.Millisecond,
		RenewDivisor: 3, Recheck: 250 * time.Millisecond, FailBackoff: 200 * time.Millisecond,
		CoolAfter: 3 * time.Second, MaxGrants: 4}
}

type keyID struct{ policy, client string }

type totals struct{ spent, short int64 }

// heldKey is the leader's view of one key: the core's bookkeeping of the
// slices it got (its spend mirrors the state machine's, which spends
// earliest deadline first too) and the state machine's counters as last
// read.
type heldKey struct {
	k                    *lease.Key[client.Grant]
	lastSpent, lastShort int64
}

// Holder is the region's holder: on the region's leader it asks the
// parent for slices by demand, records them, gives back what cools, and
// mirrors the parent's global policies; on a follower it waits.
type Holder struct {
	cfg    Config
	node   Node
	slices Slices
	parent *client.Client
	clock  *lease.SystemClock
	lcfg   lease.Config
	id     string

	mu     sync.Mutex
	keys   map[keyID]*heldKey
	leader bool
	// lastTick is the previous tick's reading, to notice a suspended
	// machine (the wall clock ran on, the monotonic one stopped);
	// withdrawing: such a wake-up was noticed and its withdrawal not yet
	// written. Both are the tick goroutine's own.
	lastTick    lease.Stamp
	withdrawing bool
	// retired keeps the state machine's totals of keys given back, so a
	// key that comes back is not taken for a burst of demand.
	retired map[keyID]totals

	fetches chan struct{} // semaphores: slice requests and returns in flight
	returns chan struct{}
	stop    chan struct{}
	wg      sync.WaitGroup
	obs     observed
}

// New makes a Holder; Start runs it.
func New(cfg Config, node Node, slices Slices) (*Holder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	parent, err := client.New(client.Config{Addrs: cfg.Parent, Token: cfg.Token, Timeout: callTimeout, FixedAddrs: true,
		AttemptTimeout: time.Second, Transport: cfg.Transport})
	if err != nil {
		return nil, err
	}
	h := &Holder{cfg: cfg, node: node, slices: slices, parent: parent, clock: lease.NewSystemClock(), lcfg: holderConfig(),
		id: HolderID(cfg.Name), keys: map[keyID]*heldKey{}, retired: map[keyID]totals{}, fetches: make(chan struct{}, maxFetches),
		returns: make(chan struct{}, maxFetches),
		stop:    make(chan struct{})}
	return h, nil
}

// Start runs the holder's loops until Stop.
func (h *Holder) Start() {
	h.wg.Add(2)
	go h.run(h.cfg.Tick, h.tick)
	go h.run(h.cfg.MirrorEvery, h.mirror)
}

// Stop ends the loops and waits for calls in flight (slices held stay
// in the log and expire; a new leader never spends them).
func (h *Holder) Stop() {
	close(h.stop)
	h.wg.Wait()
	h.parent.Close()
}

func (h *Holder) run(every time.Duration, f func()) {
	defer h.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		f()
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
	}
}

// tick reads the state machine's demand and asks for, or gives back,
// slices.
func (h *Holder) tick() {
	if !h.node.IsLeader() {
		h.withdrawing = false // the next leader's term fences the slices
		h.mu.Lock()
		if h.leader {
			// Slices this node wrote are spent no more by anyone: the
			// next leader's term fences them (fsm/slice.go).
			h.keys, h.retired, h.leader = map[keyID]*heldKey{}, map[keyID]totals{}, false
		}
		h.mu.Unlock()
		return
	}
	mirrored := map[string]policy.Policy{}
	for _, p := range h.node.Policies() {
		if p.Mirrored {
			mirrored[p.Name] = p
		}
	}
	stats := h.slices.SliceStats()
	h.obs.setStats(stats)
	now := h.clock.Now()
	if h.suspended(now) {
		// The leader's stamps follow its monotonic clock, which stopped
		// while the machine slept: the slices' expiries in the log are
		// now later than their deadlines. Withdraw them all (nothing
		// goes back up: they may have outlived their window), on every
		// tick until the withdrawal is written: right after a wake-up the
		// leader clock refuses to stamp (its wall clock moved against
		// the monotonic one) until the clock check judges it again.
		h.withdrawing = true
		h.cfg.Logger.Warn("region: the machine seems to have been suspended; withdrawing every slice")
	}
	if h.withdrawing {
		h.withdrawing = !h.withdrawAll(stats)
		return
	}
	asks, backs := h.plan(stats, mirrored, now)
	for _, a := range asks {
		select {
		case h.fetches <- struct{}{}:
			h.wg.Add(1)
			go h.fetch(a.id, a.hk, a.want)
		default:
			h.mu.Lock()
			a.hk.k.Failed(now)
			h.mu.Unlock()
		}
	}
	for _, b := range backs {
		h.giveBack(b.id, b.grants, true)
	}
}

// ask is a slice request to send; back, slices to give back.
type (
	ask struct {
		id   keyID
		hk   *heldKey
		want int64
	}
	back struct {
		id     keyID
		grants []lease.Grant[client.Grant]
	}
)

// plan reads the state machine's totals into each key's demand and spend
// and says which keys ask for slices and which give theirs back (a key
// idle for CoolAfter, or whose mirrored policy is gone).
func (h *Holder) plan(stats []fsm.SliceStat, mirrored map[string]policy.Policy, now lease.Stamp) ([]ask, []back) {
	var asks []ask
	var backs []back
	h.mu.Lock()
	defer h.mu.Unlock()
	h.leader = true
	listed := make(map[keyID]bool, len(stats))
	for _, st := range stats {
		id := keyID{st.Policy, st.Client}
		listed[id] = true
		hk := h.heldKey(id, now)
		if hk == nil {
			continue
		}
		spent, short := delta(st.Spent, hk.lastSpent), delta(st.Short, hk.lastShort)
		hk.lastSpent, hk.lastShort = st.Spent, st.Short
		if spent+short > 0 {
			hk.k.Demand(now, spent+short)
		}
		if spent > 0 {
			hk.k.Spend(now, min(spent, hk.k.Available(now)))
		}
		hk.k.TakeExpired(now, nil) // dead in the log too: nothing to give back
		p, ok := mirrored[st.Policy]
		if !ok || hk.k.Idle(now) {
			backs = append(backs, back{id, hk.k.Retire(nil)})
			delete(h.keys, id)
			h.retired[id] = totals{hk.lastSpent, hk.lastShort}
			continue
		}
		need := int64(0)
		if short > 0 {
			need = 1
		}
		if want, ok := hk.k.Want(now, need); ok {
			asks = append(asks, ask{id, hk, min(want, max(p.Limits[0].Limit/shareDiv, 1))})
		}
	}
	for id := range h.retired {
		if !listed[id] {
			delete(h.retired, id) // its slice state is gone: totals start at 0
		}
	}
	return asks, backs
}

// heldKey is the key's state, made on first sight (nil past maxKeys);
// h.mu is held.
func (h *Holder) heldKey(id keyID, now lease.Stamp) *heldKey {
	if hk := h.keys[id]; hk != nil {
		return hk
	}
	if len(h.keys) >= maxKeys {
		return nil
	}
	hk := &heldKey{k: lease.NewKey[client.Grant](&h.lcfg, now)}
	if t, ok := h.retired[id]; ok {
		hk.lastSpent, hk.lastShort = t.spent, t.short
		delete(h.retired, id)
	}
	h.keys[id] = hk
	return hk
}

// suspendJump is how far the wall clock may run ahead of the monotonic
// clock between ticks before the machine is taken to have slept.
const suspendJump = 100 * time.Millisecond

func (h *Holder) suspended(now lease.Stamp) bool {
	last := h.lastTick
	h.lastTick = now
	return last != (lease.Stamp{}) && (now.Wall-last.Wall)-(now.Mono-last.Mono) > int64(suspendJump)
}

// withdrawAll withdraws every live slice and forgets what the holder
// knew of them; it reports whether every withdrawal was written.
func (h *Holder) withdrawAll(stats []fsm.SliceStat) bool {
	var items []cluster.SliceWrite
	for _, st := range stats {
		for _, g := range st.Grants {
			items = append(items, cluster.SliceWrite{Item: fsm.SliceItem{Kind: fsm.SliceWithdraw, Policy: st.Policy, Client: st.Client, Grant: g.Grant}})
		}
	}
	written := true
	for len(items) > 0 {
		n := min(len(items), fsm.MaxGrantItems) // one entry's bound
		if _, err := h.slices.WriteSlices(items[:n]); err != nil {
			written = false
		}
		items = items[n:]
	}
	h.mu.Lock()
	h.keys, h.retired = map[keyID]*heldKey{}, map[keyID]totals{}
	h.mu.Unlock()
	return written
}

// delta is how much a running total moved (a total that went down was
// started again: all of it is new).
func delta(now, last int64) int64 {
	if now < last {
		return now
	}
	return now - last
}

// fetch asks the parent for want units of id and records the answer in
// the region's log: a slice (usable until the send instant plus the
// parent's validFor, on this process's clocks), or the parent's word
// that the window is spent.
func (h *Holder) fetch(id keyID, hk *heldKey, want int64) {
	defer h.wg.Done()
	defer func() { <-h.fetches }()
	ctx, cancel := h.callContext()
	defer cancel()
	sent := time.Now() // the slice's clock starts before the request leaves
	g, err := h.parent.Lease(ctx, id.policy, id.client, h.id, want, h.cfg.Lease)
	h.obs.parentCall(time.Since(sent), err)
	if err != nil {
		h.cfg.Logger.Debug("region: slice request failed", "policy", id.policy, "client", id.client, "err", err)
		h.ended(hk, func(k *lease.Key[client.Grant], now lease.Stamp) { k.Failed(now) })
		return
	}
	win := fsm.SliceItem{Policy: id.policy, Client: id.client, Grant: g.ID, ResetAt: unixMs(g.ResetAt),
		WindowStart: unixMs(g.WindowStart), WindowMs: g.Window.Milliseconds()}
	if g.Units == 0 {
		retry := g.RetryAfter
		if retry <= 0 {
			retry = h.lcfg.Recheck
		}
		win.Kind = fsm.SliceDry
		_, _ = h.slices.WriteSlices([]cluster.SliceWrite{{Item: win, Deadline: sent.Add(retry)}})
		h.ended(hk, func(k *lease.Key[client.Grant], now lease.Stamp) { k.Exhausted(now, retry, g) })
		return
	}
	usable := g.ValidFor
	if h.cfg.BrokenIgnoreDeadline {
		usable = time.Minute
	}
	win.Kind, win.Units = fsm.SliceGrant, g.Units
	res, err := h.slices.WriteSlices([]cluster.SliceWrite{{Item: win, Deadline: sent.Add(usable)}})
	switch {
	case err != nil && errors.Is(err, cluster.ErrOutcomeUnknown):
		// The slice may be in the log: its units stay lent until the
		// parent's expiry (under-admission, never over).
		h.ended(hk, func(k *lease.Key[client.Grant], now lease.Stamp) { k.Failed(now) })
		return
	case err != nil || res[0] < 0:
		// Never recorded (not leader any more, or nothing left of the
		// deadline): nobody here can spend it, so it goes back.
		h.returnUnits(g, g.Units)
		h.ended(hk, func(k *lease.Key[client.Grant], now lease.Stamp) { k.Failed(now) })
		return
	}
	h.obs.sliceGot(g.Units)
	var gaveWay []lease.Grant[client.Grant]
	h.ended(hk, func(k *lease.Key[client.Grant], now lease.Stamp) {
		gaveWay = k.Installed(now, h.clock.Of(sent), g.ID, g.Units, usable, g)
	})
	if len(gaveWay) > 0 {
		h.giveBack(id, gaveWay, false)
	}
}

// ended ends a request on the key's core state under the lock.
func (h *Holder) ended(hk *heldKey, f func(*lease.Key[client.Grant], lease.Stamp)) {
	now := h.clock.Now()
	h.mu.Lock()
	f(hk.k, now)
	h.mu.Unlock()
}

// giveBack withdraws slices in the region's log first, then returns
// what the withdrawal took out of them to the parent; forget also drops
// the key's slice state when nothing is left of it.
func (h *Holder) giveBack(id keyID, grants []lease.Grant[client.Grant], forget bool) {
	items := make([]cluster.SliceWrite, 0, len(grants)+1)
	for _, g := range grants {
		items = append(items, cluster.SliceWrite{Item: fsm.SliceItem{Kind: fsm.SliceWithdraw, Policy: id.policy, Client: id.client, Grant: g.ID}})
	}
	if forget {
		items = append(items, cluster.SliceWrite{Item: fsm.SliceItem{Kind: fsm.SliceWithdraw, Policy: id.policy, Client: id.client}})
	}
	if len(items) == 0 {
		return
	}
	took, err := h.slices.WriteSlices(items)
	if err != nil {
		// Not withdrawn (or not known to be): nothing goes back up; the
		// parent's units come back when its grants expire.
		return
	}
	for i, g := range grants {
		if took[i] > 0 {
			h.returnUnits(g.Info, took[i])
		}
	}
}

// returnUnits gives units of a parent grant back in the background
// (best effort: units not returned come back when the grant expires at
// the parent; with maxReturns calls in flight, a cut-off parent, the
// return is skipped).
func (h *Holder) returnUnits(g client.Grant, units int64) {
	select {
	case h.returns <- struct{}{}:
	default:
		return
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		defer func() { <-h.returns }()
		ctx, cancel := h.callContext()
		defer cancel()
		if err := h.parent.ReturnLease(ctx, g, units); err == nil {
			h.obs.returned(units)
		}
	}()
}

// callContext bounds one call to the parent by callTimeout and Stop.
func (h *Holder) callContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	go func() {
		select {
		case <-h.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// observed is what the holder reports (metrics.go).
type observed struct {
	mu      sync.Mutex
	stats   []fsm.SliceStat
	statsAt time.Time
	// fmu guards a follower's reading of the slice counters (view.go).
	fmu                      sync.Mutex
	fstats                   []fsm.SliceStat
	fstatsAt                 time.Time
	rttNs, lastOK            atomic.Int64
	calls, failures, got, up atomic.Int64
	returnedUnits            atomic.Int64
}

func (o *observed) setStats(s []fsm.SliceStat) {
	o.mu.Lock()
	o.stats, o.statsAt = s, time.Now()
	o.mu.Unlock()
}

func (o *observed) parentCall(rtt time.Duration, err error) {
	o.calls.Add(1)
	if err != nil {
		o.failures.Add(1)
		return
	}
	o.rttNs.Store(int64(rtt))
	o.lastOK.Store(time.Now().UnixNano())
}

func (o *observed) sliceGot(units int64) { o.got.Add(units) }
func (o *observed) returned(units int64) { o.returnedUnits.Add(units) }
