package cluster

import (
	"context"
	"sync"
	"time"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/window"
)

// How a node holds leases for its hot keys (cluster/DESIGN.md, "Leases").
const (
	// DefaultLeaseHotHits: a key seen this many times in the current and
	// previous second on this node is hot (about 10 hits per second or
	// more) and gets grants; colder keys go through the log
	// (Config.LeaseHotHits).
	DefaultLeaseHotHits = 20
	// minWant is the smallest grant a node asks for.
	minWant = 8
	// demandHorizon sizes a grant: what the key's local rate spends in it.
	demandHorizon = time.Second
	// prefetchAhead: ask for more when what is held lasts less than this
	// at the current rate (or the deadline is within a quarter of the
	// lease), so a hot key never waits on the log.
	prefetchAhead = 250 * time.Millisecond
	// exhaustedRetry: after a grant of nothing (the budget is spent) the
	// node refuses locally and asks again this much later (or at the
	// window's end if sooner): others may have returned units.
	exhaustedRetry = 50 * time.Millisecond
	// coolAfter: a key with no hit for this long gives back what it holds.
	coolAfter = time.Second
	// maxTracked bounds the keys whose demand a node counts per second.
	maxTracked = 100_000
	// maxFetches bounds the grant requests in flight from one node.
	maxFetches = 8
	sweepEvery = 250 * time.Millisecond
)

// DecidedLocal and DecidedLog say how a check was decided: from a lease
// this node holds, or through the log; HeaderDecided carries it.
const (
	DecidedLocal  = "local"
	DecidedLog    = "log"
	HeaderDecided = "X-Rlnode-Decided"
)

// keyID names a key without building a string per hit.
type keyID struct{ policy, client string }

// localGrant is one grant this node holds for a key.
type localGrant struct {
	id       uint64
	left     int64     // units not yet spent
	deadline time.Time // monotonic: from the send time, less the margin
	sent     time.Time // when the request was sent: g.Now is about then
	g        Grant
}

// nowMs estimates the cluster's time at now from the grant's (for the
// answer's headers only; nothing is decided on it).
func (lg *localGrant) nowMs(now time.Time) int64 { return lg.g.Now + now.Sub(lg.sent).Milliseconds() }

// heldKey is what this node knows of one key of a leased policy.
type heldKey struct {
	grants   []localGrant // by deadline
	inflight bool
	// Demand: hits in the current rate period and the previous one's rate.
	periodStart time.Time
	periodHits  int64
	rate        float64 // hits per second over the last full period
	lastHit     time.Time
	// bucket: the policy is a token bucket (learned from a grant).
	bucket bool
	// dry: the last grant lent nothing (the budget is spent). The node
	// refuses the key locally until exhausted, and while it asks again.
	dry           bool
	exhausted     time.Time
	exhaustedInfo Grant
}

// refusing reports whether the key is refused locally now: its budget was
// found spent and no grant has come since.
func (k *heldKey) refusing(now time.Time) bool {
	return k.dry && (now.Before(k.exhausted) || k.inflight)
}

// holder decides checks of leased policies from the grants this node
// holds, asks for grants for its hot keys, and gives back what cooled keys
// do not use. Every node runs one, leader or follower.
type holder struct {
	n    *Node
	id   string
	obs  LeaseObserver
	stop <-chan struct{}
	sem  chan struct{}
	wg   sync.WaitGroup

	mu   sync.Mutex
	keys map[keyID]*heldKey
	// seen counts hits per key of leased policies in the current and the
	// previous second, to tell hot keys.
	seen      [2]map[keyID]int32
	seenSince time.Time
	// leased caches which policies are leased, per table version.
	leased        map[string]bool
	leasedVersion uint64
	// Totals since start, for the status page (LeaseStats).
	decidedLocal, grantsGot uint64
}

func newHolder(n *Node) *holder {
	h := &holder{n: n, id: n.cfg.ID, obs: n.leaseObs, stop: n.stop, sem: make(chan struct{}, maxFetches),
		keys: make(map[keyID]*heldKey), seenSince: time.Now(), leasedVersion: ^uint64(0)}
	h.seen[0], h.seen[1] = make(map[keyID]int32), make(map[keyID]int32)
	h.wg.Add(1)
	go h.sweeper()
	return h
}

// close waits for the holder's goroutines (after the node's stop closed).
func (h *holder) close() { h.wg.Wait() }

// isLeased reports whether a policy is leased in this node's table; the
// cache is rebuilt when the table moves. Called with mu held.
func (h *holder) isLeased(name string) bool {
	if v := h.n.fsm.PolicyVersion(); v != h.leasedVersion {
		h.leased = make(map[string]bool)
		for _, p := range h.n.fsm.Policies() {
			if p.IsLeased() {
				h.leased[p.Name] = true
			}
		}
		h.leasedVersion = v
		// A policy that stopped being leased, or is gone, lends nothing
		// more from here (units spent meanwhile were counted).
		for k := range h.keys {
			if !h.leased[k.policy] {
				delete(h.keys, k)
			}
		}
	}
	return h.leased[name]
}

// decide tries to decide a check from held grants. It answers (result,
// true) when every hit can be allowed from a live grant (the units are
// spent) or some hit's key has an exhausted budget (refused, nothing
// spent); otherwise false, and the check goes through the log. It also
// counts demand and starts the grant requests hot keys need.
func (h *holder) decide(hits []Hit) (CheckResult, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now() // monotonic; read under the lock, right before deciding
	h.rotateSeen(now)
	local, refused := true, false
	for i := range hits {
		hit := &hits[i]
		if !h.isLeased(hit.Policy) {
			return CheckResult{}, false
		}
		id := keyID{hit.Policy, hit.Client}
		k := h.track(id, now)
		if k == nil {
			local = false
			continue
		}
		h.dropExpired(id, k, now)
		need := hit.Cost
		for j := range i { // duplicates in a group spend from one key
			if hits[j].Policy == hit.Policy && hits[j].Client == hit.Client {
				need += hits[j].Cost
			}
		}
		switch {
		case k.available() >= need:
		default:
			h.maybeFetch(id, k, now)
			if k.refusing(now) {
				refused = true
			} else {
				local = false
			}
			continue
		}
		h.maybeFetch(id, k, now)
	}
	switch {
	case refused:
		h.countLocal(hits)
		return h.localRefusal(hits, now), true
	case !local:
		return CheckResult{}, false
	}
	res := CheckResult{Allowed: true, ServedBy: h.id, Decided: DecidedLocal, Hits: make([]HitResult, len(hits))}
	for i, hit := range hits {
		k := h.keys[keyID{hit.Policy, hit.Client}]
		lg := k.spend(hit.Cost)
		h.releaseDrained(keyID{hit.Policy, hit.Client}, k)
		res.Hits[i] = localHit(hit, lg.g, k.available(), window.Allowed)
		res.Now = max(res.Now, lg.nowMs(now))
	}
	h.countLocal(hits)
	return res, true
}

// countLocal counts hits decided here from leases, allowed or refused
// (LeaseStats.DecidedLocal, the LOCAL column, the local-decisions metric).
// Called with mu held.
func (h *holder) countLocal(hits []Hit) {
	for _, hit := range hits {
		h.obs.DecidedLocally(hit.Policy, 1)
	}
	h.decidedLocal += uint64(len(hits))
}

// track counts a hit of a leased key and returns its held state once the
// key is hot (or already held), else nil.
func (h *holder) track(id keyID, now time.Time) *heldKey {
	k := h.keys[id]
	if k == nil {
		c := h.seen[0][id]
		if c == 0 && len(h.seen[0]) >= maxTracked {
			return nil
		}
		h.seen[0][id] = c + 1
		if c+1+h.seen[1][id] < int32(h.n.cfg.LeaseHotHits) {
			return nil
		}
		k = &heldKey{periodStart: now}
		h.keys[id] = k
	}
	k.lastHit = now
	if d := now.Sub(k.periodStart); d >= 250*time.Millisecond {
		k.rate = float64(k.periodHits) / d.Seconds()
		k.periodStart, k.periodHits = now, 0
	}
	k.periodHits++
	return k
}

func (h *holder) rotateSeen(now time.Time) {
	if now.Sub(h.seenSince) < time.Second {
		return
	}
	h.seen[1], h.seen[0] = h.seen[0], make(map[keyID]int32, len(h.seen[0]))
	if now.Sub(h.seenSince) >= 2*time.Second {
		clear(h.seen[1])
	}
	h.seenSince = now
}

func (k *heldKey) available() int64 {
	n := int64(0)
	for _, g := range k.grants {
		n += g.left
	}
	return n
}

// dropExpired forgets grants whose deadline has passed: their units are
// never spent after it, whatever happened to this process meanwhile. What
// they still held is given back: the promise never to spend it holds, and
// a return that reaches the log before the grant's expiry (a token
// bucket's lease runs max-clock-offset past the deadline) lifts its cap
// early. Called with mu held.
func (h *holder) dropExpired(id keyID, k *heldKey, now time.Time) {
	i := 0
	for ; i < len(k.grants) && !now.Before(k.grants[i].deadline); i++ {
		if k.grants[i].left > 0 {
			h.obs.LeaseExpired(id.policy, k.grants[i].left)
		}
	}
	if i > 0 {
		h.giveBack(id, k.grants[:i])
		k.grants = append(k.grants[:0], k.grants[i:]...)
	}
}

// spend takes cost units, earliest deadline first (the caller checked they
// are there), and returns the grant the last unit came from.
func (k *heldKey) spend(cost int64) localGrant {
	var last localGrant
	for i := 0; cost > 0 && i < len(k.grants); i++ {
		g := &k.grants[i]
		take := min(g.left, cost)
		g.left -= take
		cost -= take
		last = *g
	}
	return last
}

// releaseDrained releases a token bucket key's spent grants at once: until
// then the state machine keeps the bucket capped by their units. Called
// with mu held.
func (h *holder) releaseDrained(id keyID, k *heldKey) {
	var done []fsm.ReturnItem
	rest := k.grants[:0]
	for _, g := range k.grants {
		if g.left == 0 && g.g.Algorithm == window.TokenBucket.String() {
			done = append(done, fsm.ReturnItem{Policy: id.policy, Client: id.client, Index: g.id})
			continue
		}
		rest = append(rest, g)
	}
	if len(done) == 0 {
		return
	}
	k.grants = rest
	h.send(done)
}

// localHit describes an allowed or refused hit decided from a grant: the
// grant's window, and what this node holds of it as Remaining.
func localHit(hit Hit, g Grant, left int64, o window.Outcome) HitResult {
	parts := make([]window.Result, len(g.Parts))
	copy(parts, g.Parts)
	main := 0
	for i := range parts {
		parts[i].Outcome = o
		parts[i].Remaining = left
		if parts[i].ResetAt == g.ResetAt && parts[i].WindowStart == g.WindowStart {
			main = i
		}
	}
	return HitResult{Policy: hit.Policy, Client: hit.Client, Cost: hit.Cost, Outcome: o, Parts: parts, Main: main}
}

// localRefusal refuses a check one of whose keys has no budget left.
func (h *holder) localRefusal(hits []Hit, now time.Time) CheckResult {
	res := CheckResult{ServedBy: h.id, Decided: DecidedLocal, Hits: make([]HitResult, len(hits))}
	for i, hit := range hits {
		k := h.keys[keyID{hit.Policy, hit.Client}]
		o, g := window.Allowed, Grant{}
		if k != nil && k.refusing(now) {
			o, g = window.Refused, k.exhaustedInfo
		} else if k != nil && len(k.grants) > 0 {
			g = k.grants[0].g
		}
		res.Hits[i] = localHit(hit, g, 0, o)
		for j := range res.Hits[i].Parts {
			p := &res.Hits[i].Parts[j]
			if o == window.Refused {
				p.RetryAfterMs = max(p.RetryAfterMs, 1)
			}
		}
		res.Now = max(res.Now, g.Now)
	}
	return res
}

// maybeFetch starts a grant request for a hot key when what it holds runs
// low (or its deadline nears) and none is in flight. Called with mu held.
func (h *holder) maybeFetch(id keyID, k *heldKey, now time.Time) {
	if k.inflight || now.Before(k.exhausted) {
		return
	}
	rate := max(k.rate, float64(k.periodHits)/max(now.Sub(k.periodStart).Seconds(), 0.25))
	low := float64(k.available()) < rate*prefetchAhead.Seconds()+1
	if !low && len(k.grants) > 0 {
		g := k.grants[len(k.grants)-1]
		low = g.deadline.Sub(now) < g.g.Valid/4
	}
	if !low {
		return
	}
	select {
	case h.sem <- struct{}{}:
	default:
		return // enough requests in flight; the next hit asks again
	}
	k.inflight = true
	want := max(int64(rate*demandHorizon.Seconds()), minWant)
	lease := h.n.LeaseFor(k.bucket, DefaultLease)
	h.wg.Add(1)
	go h.fetch(id, want, lease)
}

// fetch asks the leader for a grant and installs it. The send time is read
// before the request leaves: the lease is measured from it.
func (h *holder) fetch(id keyID, want int64, lease time.Duration) {
	defer h.wg.Done()
	defer func() { <-h.sem }()
	ctx, cancel := context.WithTimeout(context.Background(), h.n.cfg.ApplyTimeout)
	defer cancel()
	go func() {
		select {
		case <-h.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	sent := time.Now()
	g, err := h.n.Grant(ctx, GrantRequest{Policy: id.policy, Client: id.client, Holder: h.id, Want: want, Lease: lease})
	h.mu.Lock()
	defer h.mu.Unlock()
	k := h.keys[id]
	if k == nil {
		// Forgotten meanwhile (the policy changed): give the units back.
		if err == nil && g.Units > 0 {
			h.giveBack(id, []localGrant{{id: g.ID, left: g.Units, g: g}})
		}
		return
	}
	k.inflight = false
	switch {
	case err != nil:
		// Nothing usable: if the entry applied and the answer was lost,
		// the units stay spent until the grant expires (under-admission).
		k.exhausted = time.Now().Add(exhaustedRetry)
	case g.Units == 0:
		k.dry = true
		wait := exhaustedRetry
		if r := time.Duration(g.ResetAt-g.Now) * time.Millisecond; r > 0 && r < wait {
			wait = r
		}
		k.exhausted, k.exhaustedInfo = sent.Add(wait), g
	default:
		lg := localGrant{id: g.ID, left: g.Units, deadline: g.Deadline(sent), sent: sent, g: g}
		k.bucket = g.Algorithm == window.TokenBucket.String()
		if !lg.deadline.After(time.Now()) {
			h.giveBack(id, []localGrant{lg}) // too short to use: back at once
			return
		}
		at := len(k.grants)
		for at > 0 && k.grants[at-1].deadline.After(lg.deadline) {
			at--
		}
		k.grants = append(k.grants, localGrant{})
		copy(k.grants[at+1:], k.grants[at:])
		k.grants[at] = lg
		k.exhausted, k.dry = time.Time{}, false
		h.grantsGot++
	}
}

// sweeper gives back what cooled keys hold and forgets idle keys.
func (h *holder) sweeper() {
	defer h.wg.Done()
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		h.mu.Lock()
		now := time.Now()
		for id, k := range h.keys {
			h.dropExpired(id, k, now)
			if now.Sub(k.lastHit) < coolAfter || k.inflight {
				continue
			}
			if len(k.grants) > 0 {
				h.giveBack(id, k.grants)
			}
			delete(h.keys, id)
		}
		h.mu.Unlock()
	}
}

// giveBack returns the unspent units of grants this node will never use
// (it has forgotten them already). Called with mu held; the request runs
// on its own goroutine.
func (h *holder) giveBack(id keyID, gs []localGrant) {
	var items []fsm.ReturnItem
	for _, g := range gs {
		if g.left > 0 {
			items = append(items, fsm.ReturnItem{Policy: id.policy, Client: id.client, Index: g.id, Units: g.left})
		}
	}
	h.send(items)
}

// send writes a return entry on its own goroutine (best effort: what is
// not returned expires).
func (h *holder) send(items []fsm.ReturnItem) {
	if len(items) == 0 {
		return
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), h.n.cfg.ApplyTimeout)
		defer cancel()
		h.n.Returns(ctx, h.id, items) // best effort: unreturned units expire
	}()
}

// LeaseStats is what one node holds of leased policies' budgets: totals,
// never per key, so the answer stays small however many keys are hot.
type LeaseStats struct {
	// KeysHeld and UnitsHeld: keys with a live grant, and their unspent
	// units, now.
	KeysHeld  int   `json:"keysHeld"`
	UnitsHeld int64 `json:"unitsHeld"`
	// DecidedLocal counts hits this node decided from its grants, allowed
	// or refused (an exhausted lease), Grants the grants it received,
	// since it started.
	DecidedLocal uint64 `json:"decidedLocal"`
	Grants       uint64 `json:"grants"`
}

// stats sums the live grants under the holder's lock (one pass over the
// held keys, which are the hot keys only).
func (h *holder) stats() LeaseStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	st := LeaseStats{DecidedLocal: h.decidedLocal, Grants: h.grantsGot}
	for _, k := range h.keys {
		var units int64
		live := false
		for _, g := range k.grants {
			if g.deadline.After(now) {
				units += g.left
				live = true
			}
		}
		if live {
			st.KeysHeld++
			st.UnitsHeld += units
		}
	}
	return st
}
