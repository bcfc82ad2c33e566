package main

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/rlnode/rlnode/client"
	"github.com/rlnode/rlnode/jepsen-lite/checker"
)

// appHolder is an application instance inside a client worker: it decides
// the worker's hits on leased keys through client.Local, from units the
// cluster leased to it (its own holder), as an application would; the
// checker judges those decisions with every other one of the key (never
// over the limit, nothing spent after its window). Hits on other keys and
// every other kind of op go over HTTP as before.
type appHolder struct {
	c     *client.Client
	local *client.Local
}

func newAppHolder(cfg workloadConfig, rt http.RoundTripper) (*appHolder, error) {
	var addrs []string
	for _, n := range cfg.nodes {
		addrs = append(addrs, n.url())
	}
	c, err := client.New(client.Config{Addrs: addrs, Timeout: cfg.timeout, TLS: cfg.tls, Transport: rt})
	if err != nil {
		return nil, err
	}
	l, err := client.NewLocal(c, client.LocalConfig{HotAfter: 2, MaxWant: 10, Lease: time.Second})
	if err != nil {
		return nil, err
	}
	return &appHolder{c: c, local: l}, nil
}

// close gives back the units the holder did not spend.
func (a *appHolder) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a.local.Close(ctx)
}

// do decides one hit on a leased key and records it like an HTTP hit:
// a decision is ok (Decided "local" when it came from a grant), an error
// that certainly counted nothing is fail, any other error unknown.
func (a *appHolder) do(ctx context.Context, t0 time.Time, worker int, t target) opRecord {
	var rec opRecord
	label(&rec, worker, checker.KindHit, nodeSpec{id: "app"}, []target{t})
	rec.Invoke = time.Since(t0).Nanoseconds()
	res, err := a.local.Allow(ctx, t.policy, t.client)
	rec.Return = time.Since(t0).Nanoseconds()
	switch {
	case err == nil:
		rec.Outcome, rec.Allowed, rec.Remaining = checker.OutcomeOK, res.Allowed, res.Remaining
		rec.RetryAfterMs = res.RetryAfter.Milliseconds()
		if !res.ResetAt.IsZero() {
			rec.ResetAt = res.ResetAt.UnixMilli()
		}
		rec.ServedBy, rec.Decided = res.ServedBy, "log"
		if strings.HasPrefix(res.ServedBy, "local:") {
			rec.Decided = "local"
		}
		for _, l := range res.Limits {
			lr := checker.LimitResult{Limit: l.Limit, WindowMs: l.Window.Milliseconds(), Remaining: l.Remaining, ResetAt: l.ResetAt.UnixMilli()}
			if !l.WindowStart.IsZero() {
				lr.WindowStart = l.WindowStart.UnixMilli()
			}
			rec.Limits = append(rec.Limits, lr)
		}
		if len(res.Limits) == 0 && res.Limit > 0 {
			// A local decision names the limit its grant was cut from:
			// the policy version the checker judges it by.
			rec.Limits = []checker.LimitResult{{Limit: res.Limit, WindowMs: res.Window.Milliseconds(), Remaining: res.Remaining, ResetAt: rec.ResetAt}}
			if !res.WindowStart.IsZero() {
				rec.Limits[0].WindowStart = res.WindowStart.UnixMilli()
			}
		}
	case errors.Is(err, client.ErrNotCounted):
		rec.Outcome, rec.Error = outcomeFail, err.Error()
	default:
		rec.Outcome, rec.Error = checker.OutcomeUnknown, err.Error()
	}
	return rec
}
