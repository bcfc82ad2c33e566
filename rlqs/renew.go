package rlqs

import (
	"context"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"

	"github.com/rlnode/rlnode/cluster"
)

// renew leases units for bs in as few grant entries as it can: one per
// lease length (a token bucket's lease is longer) and per
// cluster.MaxGrantItems buckets, each entry paid from the node's grant
// budget. Buckets left over when the budget is spent stay due and are
// renewed on a later tick. It returns the assignments to send.
func (q *stream) renew(ctx context.Context, bs []*bucket) []*rlqsv3.RateLimitQuotaResponse_BucketAction {
	if len(bs) == 0 {
		return nil
	}
	byLease := map[time.Duration][]*bucket{}
	var leases []time.Duration
	for _, b := range bs {
		l := q.lease(b)
		if byLease[l] == nil {
			leases = append(leases, l)
		}
		byLease[l] = append(byLease[l], b)
	}
	var actions []*rlqsv3.RateLimitQuotaResponse_BucketAction
	for _, l := range leases {
		group := byLease[l]
		for len(group) > 0 {
			n := min(len(group), cluster.MaxGrantItems)
			if !q.grants.take(q.holder) {
				return actions
			}
			actions = append(actions, q.renewEntry(ctx, l, group[:n])...)
			group = group[n:]
		}
	}
	return actions
}

// renewEntry asks for the grants of bs, all for lease, in one entry.
func (q *stream) renewEntry(ctx context.Context, lease time.Duration, bs []*bucket) []*rlqsv3.RateLimitQuotaResponse_BucketAction {
	items := make([]cluster.GrantItem, len(bs))
	q.mu.Lock()
	for i, b := range bs {
		items[i] = cluster.GrantItem{Policy: b.policy, Client: b.client, Want: q.want(b)}
	}
	q.mu.Unlock()
	gctx, cancel := context.WithTimeout(ctx, q.cfg.Lease)
	defer cancel()
	sent := time.Now()
	gs, err := q.cfg.Leases.Grants(gctx, q.holder, lease, items)
	q.mu.Lock()
	defer q.mu.Unlock()
	var actions []*rlqsv3.RateLimitQuotaResponse_BucketAction
	for i, b := range bs {
		var g cluster.Grant
		if err == nil {
			g = gs[i]
		}
		if a := q.settle(b, g, err, sent); a != nil {
			actions = append(actions, a)
		}
	}
	return actions
}
