package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/rlnode/rlnode/client"
	"github.com/rlnode/rlnode/jepsen-lite/checker"
)

// The budgets workload drives concurrency permits and reservations beside
// the hits (--budgets): twice budgetPermits permit workers share one key of
// a concurrency policy of limit budgetPermits, holding each permit a little
// while and leaving some to their TTL; one reservation worker reserves and
// settles
// on a fixed-window policy. The checker's permit and reservation models
// judge them (never more than the limit live; the limit holds after
// settles).
const (
	budgetPermitPolicy  = "jl-permits"
	budgetReservePolicy = "jl-reserve"
	budgetPermits       = 2
	budgetReserveLimit  = 20
	budgetPermitTTL     = 15 * time.Second
	budgetReserveTTL    = 5 * time.Second
)

type budgetWorkload struct {
	c      *client.Client
	t0     time.Time
	window time.Duration
	stopCh chan struct{}
	wg     sync.WaitGroup

	mu           sync.Mutex
	permits      []checker.PermitOp
	reservations []checker.ReservationOp
	nextID       int
}

// budgetConfig is what the budgets workload needs of a run.
type budgetConfig struct {
	adm     *admin
	urls    []string // the nodes' base URLs
	tls     *tls.Config
	timeout time.Duration
	window  time.Duration // the reservation policy's window
	seed    uint64
	t0      time.Time
}

// startBudgets creates the two policies and starts the workers; skipped
// (with the reason) when the cluster refuses them, e.g. 409
// cluster_upgrading while it cannot confirm every voter runs format R4.
func (r *runner) startBudgets(ctx context.Context, sec *security) (*budgetWorkload, string) {
	var urls []string
	for _, s := range r.cl.specs {
		urls = append(urls, s.url())
	}
	return newBudgets(ctx, budgetConfig{adm: r.adm, urls: urls, tls: sec.client, timeout: r.o.timeout, window: r.o.window, seed: r.o.seed, t0: r.t0})
}

func newBudgets(ctx context.Context, cfg budgetConfig) (*budgetWorkload, string) {
	pols := []map[string]any{
		{"name": budgetPermitPolicy, "algorithm": "concurrency", "limits": []map[string]any{{"limit": budgetPermits}}},
		{"name": budgetReservePolicy, "algorithm": "fixed_window", "limits": []map[string]any{{"limit": budgetReserveLimit, "window": cfg.window.String()}}},
	}
	for _, p := range pols {
		var err error
		for _, u := range cfg.urls {
			if err = cfg.adm.do(ctx, 10*time.Second, http.MethodPut, u+"/v1/policies/"+p["name"].(string), p, nil); err == nil {
				break
			}
		}
		if err != nil {
			return nil, fmt.Sprintf("create %s: %v", p["name"], err)
		}
	}
	c, err := client.New(client.Config{Addrs: cfg.urls, Timeout: cfg.timeout, TLS: cfg.tls})
	if err != nil {
		return nil, err.Error()
	}
	b := &budgetWorkload{c: c, t0: cfg.t0, window: cfg.window, stopCh: make(chan struct{})}
	// Twice the limit's workers on one key: only the cluster keeps them
	// from holding more than the limit at once.
	for w := range 2*budgetPermits + 1 {
		rng := rand.New(rand.NewPCG(cfg.seed, uint64(1000+w)))
		if w < 2*budgetPermits {
			b.wg.Go(func() { b.permitWorker(ctx, rng, "p0") })
		} else {
			b.wg.Go(func() { b.reserveWorker(ctx, rng, "r0") })
		}
	}
	return b, ""
}

// stop waits for the workers; an op in flight finishes first.
func (b *budgetWorkload) stop() ([]checker.PermitOp, []checker.ReservationOp) {
	select {
	case <-b.stopCh:
	default:
		close(b.stopCh)
	}
	b.wg.Wait()
	b.c.Close()
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.permits, b.reservations
}

func (b *budgetWorkload) since() int64 { return time.Since(b.t0).Nanoseconds() }

func (b *budgetWorkload) id() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nextID++
	return b.nextID
}

// pause waits d or until stop; false when stopping.
func (b *budgetWorkload) pause(ctx context.Context, d time.Duration) bool {
	select {
	case <-b.stopCh:
		return false
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// outcome sorts an error: nothing for certain, or unknown.
func outcome(err error) checker.Outcome {
	switch {
	case err == nil:
		return checker.OutcomeOK
	case errors.Is(err, client.ErrNotCounted), errors.Is(err, client.ErrUnauthorized), errors.Is(err, client.ErrInvalid),
		errors.Is(err, client.ErrClusterUpgrading), errors.Is(err, client.ErrUnknownPolicy):
		return outcomeFail
	}
	return checker.OutcomeUnknown
}

func (b *budgetWorkload) permitWorker(ctx context.Context, rng *rand.Rand, key string) {
	for b.pause(ctx, time.Duration(20+rng.IntN(80))*time.Millisecond) {
		op := checker.PermitOp{ID: b.id(), Key: key, TTLMs: budgetPermitTTL.Milliseconds(), Invoke: b.since()}
		p, err := b.c.Acquire(context.WithoutCancel(ctx), budgetPermitPolicy, key, budgetPermitTTL)
		op.Return, op.Outcome, op.Acquired = b.since(), outcome(err), err == nil && p.Acquired
		if op.Acquired && rng.IntN(50) > 0 { // one in 50 is left to its TTL
			b.pause(ctx, time.Duration(rng.IntN(300))*time.Millisecond)
			op.ReleaseInvoke = b.since()
			err := b.c.Release(context.WithoutCancel(ctx), p.ID)
			op.ReleaseOutcome = outcome(err)
			if errors.Is(err, client.ErrNotFound) {
				op.ReleaseOutcome = checker.SettleNotFound
			}
		}
		b.mu.Lock()
		b.permits = append(b.permits, op)
		b.mu.Unlock()
	}
}

func (b *budgetWorkload) reserveWorker(ctx context.Context, rng *rand.Rand, key string) {
	for b.pause(ctx, time.Duration(20+rng.IntN(80))*time.Millisecond) {
		op := checker.ReservationOp{ID: b.id(), Key: key, Units: int64(1 + rng.IntN(8)), Actual: -1}
		r, err := b.c.Reserve(context.WithoutCancel(ctx), budgetReserveTTL, client.ReserveKey{Policy: budgetReservePolicy, Key: key, Units: op.Units})
		op.Outcome, op.Reserved = outcome(err), err == nil && r.Reserved
		if op.Reserved && len(r.Keys) == 1 {
			op.ResetAt = r.Keys[0].ResetAtMs
			if rng.IntN(5) > 0 { // one in 5 stays charged in full
				op.Actual = rng.Int64N(op.Units + 1)
				_, err := b.c.Settle(context.WithoutCancel(ctx), r.ID, op.Actual)
				op.SettleOutcome = outcome(err)
				if errors.Is(err, client.ErrNotFound) {
					op.SettleOutcome = checker.SettleNotFound
				}
			}
		}
		b.mu.Lock()
		b.reservations = append(b.reservations, op)
		b.mu.Unlock()
	}
}

// checkBudgets judges the budgets workload's history; slackMs is how far
// the cluster's clock may run ahead of the runner's.
func checkBudgets(permits []checker.PermitOp, reservations []checker.ReservationOp, slackMs int64) ([]checker.Violation, string) {
	v := checker.CheckPermits(permits, budgetPermits, slackMs)
	v = append(v, checker.CheckReservations(reservations, budgetReserveLimit)...)
	count := func(ok func(int) bool, n int) int {
		c := 0
		for i := range n {
			if ok(i) {
				c++
			}
		}
		return c
	}
	acquired := count(func(i int) bool { return permits[i].Acquired }, len(permits))
	reserved := count(func(i int) bool { return reservations[i].Reserved }, len(reservations))
	var b strings.Builder
	fmt.Fprintf(&b, "permits: %d acquires (%d taken); reservations: %d (%d made)", len(permits), acquired, len(reservations), reserved)
	return v, b.String()
}
