package cluster

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/lease"
	"github.com/rlnode/rlnode/policy"
	"github.com/rlnode/rlnode/window"
)

// How a node holds leases for its hot keys (cluster/DESIGN.md, "Leases";
// the algorithm and its node parameters are lease's: lease.NodeConfig).
const (
	// DefaultLeaseHotHits: a key seen this many times in the current and
	// previous second on this node is hot (about 10 hits per second or
	// more) and gets grants while the commit path is quiet
	// (Config.LeaseHotHits).
	DefaultLeaseHotHits = 20
	// warmHits is the threshold a busy commit path lowers it to: about a
	// hit per second per node (lease.Threshold).
	warmHits = 2
	// busyLogRate: hits per second this node sends through the log above
	// which its threshold falls (lease.Threshold, lease/DESIGN.md).
	busyLogRate = 500
	// followerLogCost weighs a follower's log hits against the busy rate:
	// each is a hop to the leader and a second server's work there (the
	// larger part, cluster/config.go's MaxForwardInflight), so a follower
	// lowers its threshold at half the leader's log rate (issue 40: under
	// Zipf(1.07) on 10,000 keys followers decided 71% locally, the leader
	// 83%).
	followerLogCost = 2
	// maxTracked bounds the keys whose demand a node counts per second.
	maxTracked = 100_000
	// maxFetches bounds the grant entries in flight from one node; each
	// carries every key that asked meanwhile (up to maxGrantItems).
	maxFetches = 2
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

// heldGrant is what the node keeps of a grant beside the core's
// bookkeeping: the cluster's answer, and when the request was sent.
type heldGrant struct {
	g        Grant
	sentMono int64
}

// nowMs estimates the cluster's time at now from the grant's (for the
// answer's headers only; nothing is decided on it).
func (hg heldGrant) nowMs(now lease.Stamp) int64 {
	return hg.g.Now + (now.Mono-hg.sentMono)/int64(time.Millisecond)
}

// heldKey is what this node knows of one key of a leased policy: the
// core's state, and whether the policy is a token bucket (learned from a
// grant).
type heldKey struct {
	*lease.Key[heldGrant]
	bucket bool
}

// lender is what the holder needs of its node: grants and returns
// through the leader-operation rule, the rule for how long to ask, and
// the policy table (the forwarder's way: a narrow interface, not the
// node).
type lender interface {
	Grants(ctx context.Context, holder string, lease time.Duration, items []GrantItem) ([]Grant, error)
	Returns(ctx context.Context, holder string, items []fsm.ReturnItem) ([]int64, error)
	LeaseFor(bucket bool, usable time.Duration) time.Duration
}

// policyTable is the replicated policy table as the holder reads it.
type policyTable interface {
	PolicyVersion() uint64
	Policies() []policy.Policy
}

// leasedSet is which policies are leased in one version of the table.
type leasedSet struct {
	version uint64
	names   map[string]bool
}

// holder decides checks of leased policies from the grants this node
// holds, asks for grants for its hot keys, and gives back what cooled keys
// do not use. Every node runs one, leader or follower. Checks of strict
// policies never take its lock: they read the leased set (an atomic
// pointer) and leave.
type holder struct {
	id           string
	lender       lender
	table        policyTable
	obs          LeaseObserver
	applyTimeout time.Duration
	hotHits      int
	cfg          lease.Config
	clk          lease.Clock
	stop         <-chan struct{}
	// leading says this node leads now (nil: as a leader); a follower's
	// log hits weigh followerLogCost each in the warm-key threshold.
	leading func() bool
	sem     chan struct{}
	// kick wakes the fetcher: keys wait in pending (by lease length).
	kick chan struct{}
	wg   sync.WaitGroup

	leased atomic.Pointer[leasedSet]
	// logHits counts hits this node sent through the log since the last
	// sweep: how busy the commit path is (the warm-key threshold).
	logHits atomic.Int64

	mu      sync.Mutex
	pending map[time.Duration][]fsm.GrantItem
	returns []fsm.ReturnItem
	keys    map[keyID]*heldKey
	tracker *lease.Tracker[keyID]
	// keysVersion is the table version the held keys were checked against.
	keysVersion uint64
	lastSweep   lease.Stamp
	// Totals since start, for the status page (LeaseStats).
	decidedLocal, grantsGot uint64
}

func newHolder(n *Node) *holder {
	h := newHolderOver(n.cfg.ID, n.leases, n.fsm, n.leaseObs, n.cfg.ApplyTimeout, n.cfg.LeaseHotHits, lease.NewSystemClock(), n.stop)
	h.leading = n.IsLeader
	h.start()
	return h
}

// start runs the holder's sweeper and fetcher until stop closes.
func (h *holder) start() {
	h.wg.Add(2)
	go h.sweeper()
	go h.fetcher()
}

// newHolderOver builds a holder over the parts it needs (tests give it
// their own lender, table and clock); the caller starts its sweeper.
func newHolderOver(id string, l lender, table policyTable, obs LeaseObserver, applyTimeout time.Duration, hotHits int,
	clk lease.Clock, stop <-chan struct{}) *holder {
	now := clk.Now()
	return &holder{id: id, lender: l, table: table, obs: obs, applyTimeout: applyTimeout, hotHits: hotHits,
		cfg: lease.NodeConfig(), clk: clk, stop: stop, sem: make(chan struct{}, maxFetches), kick: make(chan struct{}, 1),
		pending: make(map[time.Duration][]fsm.GrantItem), keys: make(map[keyID]*heldKey),
		tracker: lease.NewTracker[keyID](hotHits, time.Second, maxTracked, now), keysVersion: ^uint64(0), lastSweep: now}
}

// close waits for the holder's goroutines (after the node's stop closed).
func (h *holder) close() { h.wg.Wait() }

// leasedNow is the leased set of the table as it is now, rebuilt when
// the table moved (lock-free: racing rebuilds store the same set).
func (h *holder) leasedNow() *leasedSet {
	v := h.table.PolicyVersion()
	if s := h.leased.Load(); s != nil && s.version == v {
		return s
	}
	s := &leasedSet{version: v, names: make(map[string]bool)}
	for _, p := range h.table.Policies() {
		if p.IsLeased() { // a region's mirrored global policy too: its grants are sub-leases of slices
			s.names[p.Name] = true
		}
	}
	h.leased.Store(s)
	return s
}

// countLog records hits that went through the log (any policy).
func (h *holder) countLog(n int) { h.logHits.Add(int64(n)) }

// forgetUnleased drops the keys of policies that stopped being leased or
// are gone: they lend nothing more from here (units spent meanwhile were
// counted). Called with mu held.
func (h *holder) forgetUnleased(set *leasedSet) {
	if set.version == h.keysVersion {
		return
	}
	for id := range h.keys {
		if !set.names[id.policy] {
			delete(h.keys, id)
		}
	}
	h.keysVersion = set.version
}

// decide tries to decide a check from held grants. It answers (result,
// true) when every hit can be allowed from a live grant (the units are
// spent) or some hit's key has an exhausted budget (refused, nothing
// spent); otherwise false, and the check goes through the log. It also
// counts demand and starts the grant requests hot keys need. A check
// with a hit of a strict policy returns before taking the lock.
// The result's slices come from buf (nil: allocated).
func (h *holder) decide(hits []Hit, buf *resultBuf) (CheckResult, bool) {
	set := h.leasedNow()
	for i := range hits {
		if !set.names[hits[i].Policy] {
			return CheckResult{}, false
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.forgetUnleased(set)
	now := h.clk.Now() // read under the lock, right before deciding
	local, refused := true, false
	for i := range hits {
		hit := &hits[i]
		id := keyID{hit.Policy, hit.Client}
		k := h.track(id, hit.Cost, now)
		if k == nil {
			local = false
			continue
		}
		h.giveBack(id, k.TakeExpired(now, nil), true)
		need := hit.Cost
		for j := range i { // duplicates in a group spend from one key
			if hits[j].Policy == hit.Policy && hits[j].Client == hit.Client {
				need += hits[j].Cost
			}
		}
		h.maybeFetch(id, k, now, need)
		if k.Available(now) >= need {
			continue
		}
		if k.Refusing(now) {
			refused = true
		} else {
			local = false
		}
	}
	switch {
	case refused:
		h.countLocal(hits)
		return h.localRefusal(hits, now, buf), true
	case !local:
		for _, hit := range hits {
			h.obs.DecidedThroughLog(hit.Policy, 1)
		}
		return CheckResult{}, false
	}
	res := CheckResult{Allowed: true, ServedBy: h.id, Decided: DecidedLocal, Hits: buf.hitResults(len(hits))}
	for i, hit := range hits {
		id := keyID{hit.Policy, hit.Client}
		k := h.keys[id]
		from, _ := k.Spend(now, hit.Cost)
		hg := from.Info
		res.Hits[i] = localHit(hit, hg.g, k.Available(now), window.Allowed, buf)
		res.Now = max(res.Now, hg.nowMs(now))
		if k.bucket {
			h.releaseDrained(id, k)
		}
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

// refund gives each hit's Cost back to the grants this node holds for
// its key, as far as they were spent (lease.Key.Refund), and reports per
// hit what it gave; the rest of a refund goes through the log. Hits of
// strict policies leave before the lock.
func (h *holder) refund(hits []Hit) []int64 {
	got := make([]int64, len(hits))
	set := h.leasedNow()
	leased := false
	for i := range hits {
		leased = leased || set.names[hits[i].Policy]
	}
	if !leased {
		return got
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.clk.Now()
	for i, hit := range hits {
		if k := h.keys[keyID{hit.Policy, hit.Client}]; k != nil && set.names[hit.Policy] {
			got[i] = k.Refund(now, hit.Cost)
		}
	}
	return got
}

// track counts a hit of a leased key and returns its held state once the
// key is hot (or already held), else nil. Called with mu held.
func (h *holder) track(id keyID, cost int64, now lease.Stamp) *heldKey {
	k := h.keys[id]
	if k == nil {
		if !h.tracker.Hit(id, now) {
			return nil
		}
		h.tracker.Forget(id)
		k = &heldKey{Key: lease.NewKey[heldGrant](&h.cfg, now)}
		h.keys[id] = k
	}
	k.Demand(now, cost)
	return k
}

// releaseDrained releases a token bucket key's spent grants at once: until
// then the state machine keeps the bucket capped by their units. Called
// with mu held.
func (h *holder) releaseDrained(id keyID, k *heldKey) {
	var done []fsm.ReturnItem
	for _, g := range k.TakeDrained(nil) {
		done = append(done, fsm.ReturnItem{Policy: id.policy, Client: id.client, Index: g.ID})
	}
	h.send(done)
}

// localHit describes an allowed or refused hit decided from a grant: the
// grant's window, and what this node holds of it as Remaining.
func localHit(hit Hit, g Grant, left int64, o window.Outcome, buf *resultBuf) HitResult {
	parts := buf.results(len(g.Parts))
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
func (h *holder) localRefusal(hits []Hit, now lease.Stamp, buf *resultBuf) CheckResult {
	res := CheckResult{ServedBy: h.id, Decided: DecidedLocal, Hits: buf.hitResults(len(hits))}
	for i, hit := range hits {
		k := h.keys[keyID{hit.Policy, hit.Client}]
		o, g := window.Allowed, Grant{}
		if k != nil {
			last, _ := k.Last()
			g = last.g
			if k.Refusing(now) {
				o = window.Refused
			}
		}
		res.Hits[i] = localHit(hit, g, 0, o, buf)
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

// sweeper gives back what cooled keys hold, forgets idle keys, and sets
// the hot-key threshold from how busy the log was.
func (h *holder) sweeper() {
	defer h.wg.Done()
	everyTick(h.stop, sweepEvery, h.sweep)
}

func (h *holder) sweep() {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.clk.Now()
	if d := time.Duration(now.Mono - h.lastSweep.Mono); d > 0 {
		rate := float64(h.logHits.Swap(0)) / d.Seconds()
		if h.leading != nil && !h.leading() {
			rate *= followerLogCost
		}
		h.tracker.SetThreshold(lease.Threshold(h.hotHits, min(warmHits, h.hotHits), rate, busyLogRate))
		h.lastSweep = now
	}
	for id, k := range h.keys {
		h.giveBack(id, k.TakeExpired(now, nil), true)
		if !k.Idle(now) {
			continue
		}
		h.giveBack(id, k.Retire(nil), false)
		delete(h.keys, id)
	}
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
	now := h.clk.Now()
	st := LeaseStats{DecidedLocal: h.decidedLocal, Grants: h.grantsGot}
	for _, k := range h.keys {
		if units, live := k.Held(now); live {
			st.KeysHeld++
			st.UnitsHeld += units
		}
	}
	return st
}

// everyTick calls f every period until stop closes (the holders' sweeps).
func everyTick(stop <-chan struct{}, period time.Duration, f func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		f()
	}
}
