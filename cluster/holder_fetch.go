package cluster

import (
	"context"
	"time"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/lease"
	"github.com/rlnode/rlnode/window"
)

// The holder's traffic to the leader: grant requests and returns, queued
// under the holder's lock and written by one fetcher goroutine, every key
// queued meanwhile in one entry (cluster/DESIGN.md, "Node as holder").

// maybeFetch queues a grant request for a hot key when the core says so
// (what it holds runs low, or its deadline nears); the fetcher sends the
// queued keys together. Called with mu held.
func (h *holder) maybeFetch(id keyID, k *heldKey, now lease.Stamp, need int64) {
	want, ok := k.Want(now, need)
	if !ok {
		return
	}
	d := h.lender.LeaseFor(k.bucket, lease.DefaultLease)
	h.pending[d] = append(h.pending[d], fsm.GrantItem{Policy: id.policy, Client: id.client, Want: want})
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// fetcher sends the queued grant requests and returns, as few entries as it can: the
// keys of one lease length in one grant entry (group commit for grants:
// on a skewed key set thousands of warm keys renew every second, and one
// entry each would load the log more than their hits did), at most
// maxFetches entries in flight.
func (h *holder) fetcher() {
	defer h.wg.Done()
	for {
		select {
		case <-h.stop:
			return
		case <-h.kick:
		}
		for {
			h.mu.Lock()
			var d time.Duration
			var items []fsm.GrantItem
			for l, its := range h.pending {
				d, items = l, its
				break
			}
			if n := len(items); n > maxGrantItems {
				items, h.pending[d] = items[:maxGrantItems:maxGrantItems], items[maxGrantItems:]
			} else if n > 0 {
				delete(h.pending, d)
			}
			h.mu.Unlock()
			if len(items) == 0 {
				break
			}
			select {
			case h.sem <- struct{}{}:
			case <-h.stop:
				h.abandon(items)
				return
			}
			h.wg.Add(1)
			go h.fetch(d, items)
		}
		h.sendReturns()
	}
}

// abandon ends the requests of items that will not be sent.
func (h *holder) abandon(items []fsm.GrantItem) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.clk.Now()
	for _, it := range items {
		if k := h.keys[keyID{it.Policy, it.Client}]; k != nil {
			k.Failed(now)
		}
	}
}

// fetch asks the leader for the grants of items in one entry and installs
// them. The send time is read before the request leaves: each lease is
// measured from it, on both clocks.
func (h *holder) fetch(leaseFor time.Duration, items []fsm.GrantItem) {
	defer h.wg.Done()
	defer func() { <-h.sem }()
	ctx, cancel := timeoutOrStop(h.stop, h.applyTimeout)
	defer cancel()
	sent := h.clk.Now()
	gs, err := h.lender.Grants(ctx, h.id, leaseFor, items)
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.clk.Now()
	var orphans []fsm.ReturnItem
	for i, it := range items {
		id := keyID{it.Policy, it.Client}
		var g Grant
		if err == nil {
			g = gs[i]
		}
		k := h.keys[id]
		if k == nil {
			// Forgotten meanwhile (the policy changed): give the units back.
			if g.Units > 0 {
				orphans = append(orphans, fsm.ReturnItem{Policy: id.policy, Client: id.client, Index: g.ID, Units: g.Units})
			}
			continue
		}
		switch {
		case err != nil || g.ID == 0 && g.Units == 0:
			// Nothing usable: if the entry applied and the answer was
			// lost, the units stay spent until the grant expires
			// (under-admission). ID 0: the policy is unknown or strict.
			k.Failed(now)
		case g.Units == 0:
			k.Exhausted(now, time.Duration(g.ResetAt-g.Now)*time.Millisecond, heldGrant{g: g, sentMono: sent.Mono})
		default:
			k.bucket = g.Algorithm == window.TokenBucket.String()
			h.giveBack(id, k.Installed(now, sent, g.ID, g.Units, g.UsableFor, heldGrant{g: g, sentMono: sent.Mono}), false)
			h.grantsGot++
		}
	}
	h.send(orphans)
}

// giveBack returns the unspent units of grants this node will never use
// (it has forgotten them already); expired says they ran out unspent.
// Called with mu held; the request runs on its own goroutine.
func (h *holder) giveBack(id keyID, gs []lease.Grant[heldGrant], expired bool) {
	var items []fsm.ReturnItem
	for _, g := range gs {
		if g.Left > 0 {
			if expired {
				h.obs.LeaseExpired(id.policy, g.Left)
			}
			items = append(items, fsm.ReturnItem{Policy: id.policy, Client: id.client, Index: g.ID, Units: g.Left})
		}
	}
	h.send(items)
}

// send queues returns for the fetcher, which writes every return queued
// meanwhile in one entry (best effort: what is not returned expires).
// Called with mu held.
func (h *holder) send(items []fsm.ReturnItem) {
	if len(items) == 0 {
		return
	}
	h.returns = append(h.returns, items...)
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// sendReturns writes the queued returns, up to maxGrantItems per entry.
func (h *holder) sendReturns() {
	for {
		h.mu.Lock()
		items := h.returns
		if len(items) > maxGrantItems {
			items, h.returns = items[:maxGrantItems:maxGrantItems], items[maxGrantItems:]
		} else {
			h.returns = nil
		}
		h.mu.Unlock()
		if len(items) == 0 {
			return
		}
		select {
		case h.sem <- struct{}{}:
		case <-h.stop:
			return // unreturned units expire
		}
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			defer func() { <-h.sem }()
			ctx, cancel := context.WithTimeout(context.Background(), h.applyTimeout)
			defer cancel()
			h.lender.Returns(ctx, h.id, items) // best effort: unreturned units expire
		}()
	}
}
