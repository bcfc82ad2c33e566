package cluster

import (
	"sync"
	"time"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/lease"
	"github.com/rlnode/rlnode/window"
)

// callHolder answers GLOBAL per-call items (gubernator's GLOBAL) from
// node leases on their keys: the lease core (lease.Key, lease.Tracker)
// with the node's parameters, grants and returns as lease items of calls
// entries (fsm/call_lease.go). The safety argument is gubapi/DESIGN.md's
// "GLOBAL". Every node runs one, leader or follower.
type callHolder struct {
	id           string
	route        callsRoute
	obs          LeaseObserver
	applyTimeout time.Duration
	cfg          lease.Config
	clk          lease.Clock
	stop         <-chan struct{}
	kick         chan struct{}
	wg           sync.WaitGroup

	mu      sync.Mutex
	keys    map[callKeyID]*heldCallKey
	tracker *lease.Tracker[callKeyID]
	pending []CallItem // grant requests, sent together
	returns []CallItem
}

// callKeyID is a lease key: the stored key and the parameters its grants
// were lent under. A call with other parameters is another lease key, so
// it finds nothing held and goes through the log, where gubernator's
// change rules apply (gubapi/DESIGN.md).
type callKeyID struct {
	name, key       string
	limit, duration int64
	gregorian       bool
}

// callGrant is what an answer needs of a grant: the window's last instant.
type callGrant struct{ reset int64 }

// heldCallKey is the core's state of a lease key, and until when its
// items go through the log without asking: a policy of the name decides
// them (asking every back-off would write an entry each time for
// nothing).
type heldCallKey struct {
	*lease.Key[callGrant]
	strictUntil int64 // monotonic ns
}

// strictFor is how long a lease key that could not be lent from goes
// through the log before asking again.
const strictFor = time.Second

const (
	// callHotHits: a GLOBAL key seen this many times in two seconds on a
	// node is leased (the caller asked for local answers).
	callHotHits = 3
	// DecidedLocalGlobal is the label under which local answers of GLOBAL
	// items are counted (LeaseObserver.DecidedLocally): item names are
	// callers' and unbounded, so they are not labels.
	DecidedLocalGlobal = "gubernator:global"
)

func newCallHolder(id string, route callsRoute, obs LeaseObserver, applyTimeout time.Duration,
	clk lease.Clock, stop <-chan struct{}) *callHolder {
	now := clk.Now()
	return &callHolder{id: id, route: route, obs: obs, applyTimeout: applyTimeout,
		cfg: lease.NodeConfig(), clk: clk, stop: stop, kick: make(chan struct{}, 1),
		keys: make(map[callKeyID]*heldCallKey), tracker: lease.NewTracker[callKeyID](callHotHits, time.Second, maxTracked, now)}
}

// start runs the sweeper and the fetcher until stop closes.
func (h *callHolder) start() {
	h.wg.Add(2)
	go h.sweeper()
	go h.fetcher()
}

func (h *callHolder) close() { h.wg.Wait() }

// leasable reports whether an item may be answered from a lease: a
// token-bucket hit that changes nothing but the count.
func leasable(it CallItem) bool {
	c := it.Call
	return c.Alg == window.CallTokenBucket && c.Hits >= 1 && !c.ResetRemaining && !c.DrainOverLimit
}

func idOf(it CallItem) callKeyID {
	return callKeyID{name: it.Name, key: it.Key, limit: it.Call.Limit, duration: it.Call.Duration, gregorian: it.Call.Gregorian}
}

// decide answers the GLOBAL items it can from held grants: out[i] is set
// and local[i] true for those; the rest go through the log. It counts
// demand and starts the grant requests hot keys need.
func (h *callHolder) decide(items []CallItem, global []bool, out []CallOutcome, local []bool) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.clk.Now() // read under the lock, right before deciding
	n := 0
	for i, it := range items {
		if i >= len(global) || !global[i] || !leasable(it) {
			continue
		}
		id := idOf(it)
		k := h.keys[id]
		if k == nil {
			if !h.tracker.Hit(id, now) {
				continue
			}
			h.tracker.Forget(id)
			k = &heldCallKey{Key: lease.NewKey[callGrant](&h.cfg, now)}
			h.keys[id] = k
		}
		if now.Mono < k.strictUntil {
			continue
		}
		k.Demand(now, it.Call.Hits)
		h.giveBack(id, k.TakeExpired(now, nil))
		h.maybeFetch(id, k, now, it.Call.Hits)
		last, _ := k.Last()
		switch {
		case k.Available(now) >= it.Call.Hits:
			from, _ := k.Spend(now, it.Call.Hits)
			out[i] = CallOutcome{CallResult: window.CallResult{Limit: it.Call.Limit, Remaining: k.Available(now), Reset: from.Info.reset}}
		case k.Refusing(now):
			out[i] = CallOutcome{CallResult: window.CallResult{Over: true, Limit: it.Call.Limit, Reset: last.reset}}
		default:
			continue
		}
		local[i] = true
		n++
	}
	if n > 0 {
		h.obs.DecidedLocally(DecidedLocalGlobal, n)
	}
	return n
}

// maybeFetch queues a grant request when the core says so. Called with
// mu held.
func (h *callHolder) maybeFetch(id callKeyID, k *heldCallKey, now lease.Stamp, need int64) {
	want, ok := k.Want(now, need)
	if !ok {
		return
	}
	h.pending = append(h.pending, h.item(id, fsm.CallLease{Grant: true, Holder: h.id, Want: min(want, window.MaxCallLimit),
		LeaseMs: lease.DefaultLease.Milliseconds()}))
	h.wake()
}

func (h *callHolder) item(id callKeyID, l fsm.CallLease) CallItem {
	return CallItem{Name: id.name, Key: id.key, Lease: l, Call: window.Call{Alg: window.CallTokenBucket,
		Limit: id.limit, Duration: id.duration, Gregorian: id.gregorian}}
}

func (h *callHolder) wake() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// giveBack queues returns of the unspent units of grants this node will
// not use. Called with mu held.
func (h *callHolder) giveBack(id callKeyID, gs []lease.Grant[callGrant]) {
	for _, g := range gs {
		if g.Left > 0 {
			h.returns = append(h.returns, h.item(id, fsm.CallLease{Return: true, Holder: h.id, Index: g.ID, Units: g.Left}))
		}
	}
	if len(gs) > 0 {
		h.wake()
	}
}

// fetcher writes the queued grant requests and returns, up to a batch per
// entry, one entry at a time.
func (h *callHolder) fetcher() {
	defer h.wg.Done()
	for {
		select {
		case <-h.stop:
			return
		case <-h.kick:
		}
		for {
			h.mu.Lock()
			grants := takeCalls(&h.pending)
			returns := takeCalls(&h.returns)
			h.mu.Unlock()
			if len(grants) == 0 && len(returns) == 0 {
				break
			}
			if len(grants) > 0 {
				h.fetch(grants)
			}
			if len(returns) > 0 {
				ctx, cancel := timeoutOrStop(h.stop, h.applyTimeout)
				h.route.calls(ctx, CallsRequest{Items: returns}) // best effort: unreturned units stay spent
				cancel()
			}
		}
	}
}

// takeCalls removes up to MaxCallsPerRequest items from q.
func takeCalls(q *[]CallItem) []CallItem {
	items := *q
	if len(items) > MaxCallsPerRequest {
		items, *q = items[:MaxCallsPerRequest:MaxCallsPerRequest], items[MaxCallsPerRequest:]
	} else {
		*q = nil
	}
	return items
}

// fetch asks for the grants of items in one entry and installs them. The
// send time is read before the request leaves: each grant is usable from
// it, on both clocks.
func (h *callHolder) fetch(items []CallItem) {
	ctx, cancel := timeoutOrStop(h.stop, h.applyTimeout)
	defer cancel()
	sent := h.clk.Now()
	ans, err := h.route.calls(ctx, CallsRequest{Items: items})
	if err == nil && len(ans.Items) != len(items) {
		err = ErrOutcomeUnknown
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.clk.Now()
	for i, it := range items {
		id := idOf(it)
		var o CallOutcome
		if err == nil {
			o = ans.Items[i]
		}
		k := h.keys[id]
		if k == nil {
			if o.Units > 0 { // forgotten meanwhile: give the units back
				h.returns = append(h.returns, h.item(id, fsm.CallLease{Return: true, Holder: h.id, Index: o.GrantIndex, Units: o.Units}))
				h.wake()
			}
			continue
		}
		info := callGrant{reset: o.Reset}
		switch {
		case err != nil:
			k.Failed(now) // ask again after the back-off
		case !o.Leasable:
			// No live key of these parameters (the log creates or changes
			// it): ask again after the back-off. A policy decides the
			// name: through the log for a while.
			k.Failed(now)
			if o.Policy {
				k.strictUntil = now.Mono + int64(strictFor)
			}
		case o.Units == 0:
			k.Exhausted(now, time.Duration(max(o.Reset+1-ans.Now, 0))*time.Millisecond, info)
		default:
			// Usable from the send for what the leader said
			// (callCommitter.usableMs: the margin, and the clock
			// allowance at the window's end while it is needed).
			usable := time.Duration(o.UsableMs) * time.Millisecond
			if usable <= 0 {
				k.Failed(now) // nothing usable: back off, the units go back
				h.giveBack(id, []lease.Grant[callGrant]{{ID: o.GrantIndex, Left: o.Units}})
				continue
			}
			h.giveBack(id, k.Installed(now, sent, o.GrantIndex, o.Units, usable, info))
		}
	}
}

// sweeper gives back what cooled keys hold and forgets idle keys.
func (h *callHolder) sweeper() {
	defer h.wg.Done()
	everyTick(h.stop, sweepEvery, h.sweep)
}

func (h *callHolder) sweep() {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.clk.Now()
	for id, k := range h.keys {
		h.giveBack(id, k.TakeExpired(now, nil))
		if k.Idle(now) && !k.Fetching() {
			h.giveBack(id, k.Retire(nil))
			delete(h.keys, id)
		}
	}
}
