package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/rlnode/rlnode/client"
	"github.com/rlnode/rlnode/jepsen-lite/checker"
)

// regionHolder is an application instance in a region: a load worker
// that decides its hits of the global fixed-window policy in-process
// through client.Local, from sub-leases its region lends out of the
// region's slices (region/DESIGN.md "Sub-leases"), against that region's
// nodes only. Its allowed hits go into the same per-global-window total
// as every HTTP hit: a local decision is made at the holder's time,
// between the record's Sent and Recv, and names the global window of the
// slice it was lent from. Cold keys, and grants the region cannot make
// (no slice: 503 parent_unreachable), go to the region's check as
// client.Local does for any application.
type regionHolder struct {
	name  string // the record's Node: "app-<region><n>"
	c     *client.Client
	local *client.Local
}

// Settings of every region holder, as the single-cluster mode's
// (appholder.go): hot after two hits, at most 10 units a grant, grants
// asked for a second.
const (
	regionHolderHotAfter = 2
	regionHolderMaxWant  = 10
	regionHolderLease    = time.Second
)

func newRegionHolder(name string, nodes []nodeSpec, timeout time.Duration, rt http.RoundTripper) (*regionHolder, error) {
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.url())
	}
	c, err := client.New(client.Config{Addrs: addrs, Timeout: timeout, Transport: rt})
	if err != nil {
		return nil, fmt.Errorf("holder %s: %w", name, err)
	}
	l, err := client.NewLocal(c, client.LocalConfig{Holder: "jl-" + name, HotAfter: regionHolderHotAfter,
		MaxWant: regionHolderMaxWant, Lease: regionHolderLease})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("holder %s: %w", name, err)
	}
	return &regionHolder{name: name, c: c, local: l}, nil
}

// close gives back the units the holder did not spend (while the nodes
// still run) and closes its client.
func (h *regionHolder) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = h.local.Close(ctx) // units not given back are lost until they expire: under-admission only
	h.c.Close()
}

// hit decides one hit of key and records it as the HTTP path does: an
// answer is ok (Decided "local" when the holder's units paid for it or
// refused it), an error that certainly counted nothing is fail, any
// other error unknown.
func (h *regionHolder) hit(abort context.Context, region string, key loadKey, timeout time.Duration) regionRecord {
	ctx, cancel := context.WithTimeout(abort, timeout)
	defer cancel()
	sent := time.Now()
	res, err := h.local.Allow(ctx, key.policy, key.key)
	recv := time.Now()
	rec := regionRecord{Region: region, Node: h.name, Policy: key.policy, Key: key.key, Sent: sent.UnixNano(), Recv: recv.UnixNano()}
	var ce *client.Error
	switch {
	case err == nil:
		rec.Outcome, rec.Allowed, rec.Status = checker.OutcomeOK, res.Allowed, http.StatusOK
		if !res.Allowed {
			rec.Status = http.StatusTooManyRequests
		}
		if !res.ResetAt.IsZero() {
			rec.ResetAt = res.ResetAt.UnixMilli()
		}
		if strings.HasPrefix(res.ServedBy, "local:") {
			rec.Decided = decidedLocal
		}
	case errors.As(err, &ce) && ce.Status != 0:
		rec.Status, rec.Code, rec.Error = ce.Status, ce.Code, err.Error()
		rec.Outcome = checker.OutcomeUnknown
		if notApplied(checker.KindHit, ce.Status, ce.Code) || errors.Is(err, client.ErrNotCounted) {
			rec.Outcome = outcomeFail
		}
	case errors.Is(err, client.ErrNotCounted):
		rec.Outcome, rec.Error = outcomeFail, err.Error()
	default:
		rec.Outcome, rec.Error = checker.OutcomeUnknown, err.Error()
	}
	return rec
}

// decidedLocal marks a record decided in the holder's process.
const decidedLocal = "local"

// holdersSummary is summary.json's "holders": how many ran where, and
// what they decided.
func holdersSummary(targets []regionTarget, c map[string]int) string {
	var where []string
	n := 0
	for _, t := range targets {
		if t.holders > 0 {
			where = append(where, fmt.Sprintf("%s %d", t.region, t.holders))
			n += t.holders
		}
	}
	if n == 0 {
		return "none (--region-holders 0,0)"
	}
	return fmt.Sprintf("%d (%s): %d hits, %d allowed, %d decided locally from sub-leases (%d of them allowed), %d through the region's check",
		n, strings.Join(where, ", "), c["holderHits"], c["holderAllowed"], c["holderLocal"], c["holderLocalAllowed"], c["holderHits"]-c["holderLocal"])
}
