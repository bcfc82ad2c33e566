package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
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
	// gateWait bounds the wait for the version gate (0: budgetGateWait).
	gateWait time.Duration
}

// budgetGateWait is how long the workload waits for the version gate to
// open: a cluster just formed refuses a concurrency policy with 409
// cluster_upgrading until every node has read every member's format
// (clock readings, once a second), normally a second or two.
const budgetGateWait = 30 * time.Second

// createBudgetPolicy puts p through the first node that takes it, asking
// again while the cluster answers 409 cluster_upgrading, for up to wait:
// the workload waits for the gate rather than skip. Any other refusal,
// or a gate still closed after wait, is the error.
func createBudgetPolicy(ctx context.Context, adm *admin, urls []string, p map[string]any, wait time.Duration) error {
	if wait <= 0 {
		wait = budgetGateWait
	}
	deadline := time.Now().Add(wait)
	for {
		var err error
		upgrading := false
		for _, u := range urls {
			if err = adm.do(ctx, 10*time.Second, http.MethodPut, u+"/v1/policies/"+p["name"].(string), p, nil); err == nil {
				return nil
			}
			var ae *apiError
			upgrading = upgrading || errors.As(err, &ae) && ae.Code == "cluster_upgrading"
		}
		if !upgrading {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the version gate stayed closed for %s: %w", wait, err)
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// startBudgets creates the two policies and starts the workers, waiting
// (bounded) for the version gate to open; skipped (with the reason) when
// the cluster refuses them otherwise, or the gate stays closed.
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
		if err := createBudgetPolicy(ctx, cfg.adm, cfg.urls, p, cfg.gateWait); err != nil {
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

// settleOutcome is outcome for a release or a settle, which can also
// find nothing to end (released, settled or expired before).
func settleOutcome(err error) checker.Outcome {
	if errors.Is(err, client.ErrNotFound) {
		return checker.SettleNotFound
	}
	return outcome(err)
}

func (b *budgetWorkload) permitWorker(ctx context.Context, rng *rand.Rand, key string) {
	for b.pause(ctx, time.Duration(20+rng.IntN(80))*time.Millisecond) {
		op := checker.PermitOp{ID: b.id(), Key: key, TTLMs: budgetPermitTTL.Milliseconds(), Invoke: b.since()}
		p, err := b.c.Acquire(context.WithoutCancel(ctx), budgetPermitPolicy, key, budgetPermitTTL)
		op.Return, op.Outcome, op.Acquired = b.since(), outcome(err), err == nil && p.Acquired
		if op.Acquired && rng.IntN(50) > 0 { // one in 50 is left to its TTL
			b.pause(ctx, time.Duration(rng.IntN(300))*time.Millisecond)
			op.ReleaseInvoke = b.since()
			op.ReleaseOutcome = settleOutcome(b.c.Release(context.WithoutCancel(ctx), p.ID))
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
				op.SettleOutcome = settleOutcome(err)
			}
		}
		b.mu.Lock()
		b.reservations = append(b.reservations, op)
		b.mu.Unlock()
	}
}

// checkBudgetsVacuous names a budgets workload that ran but never took a
// permit or never made a reservation: its models then proved nothing, as
// if it had been skipped (every call refused, e.g. 409 or 404).
const checkBudgetsVacuous = "budgets-vacuous"

// checkBudgets judges the budgets workload's history; slackMs is how far
// the cluster's clock may run ahead of the runner's.
func checkBudgets(permits []checker.PermitOp, reservations []checker.ReservationOp, slackMs int64) ([]checker.Violation, string) {
	v := checker.CheckPermits(permits, budgetPermits, slackMs)
	v = append(v, checker.CheckReservations(reservations, budgetReserveLimit)...)
	var pc, rc outcomeCount
	for _, p := range permits {
		pc.add(p.Outcome, p.Acquired)
	}
	for _, r := range reservations {
		rc.add(r.Outcome, r.Reserved)
	}
	if pc.made == 0 || rc.made == 0 {
		v = append(v, checker.Violation{Check: checkBudgetsVacuous, Key: "budgets",
			Detail: fmt.Sprintf("%d permits taken of %d acquires, %d reservations made of %d: the budgets workload proved nothing", pc.made, len(permits), rc.made, len(reservations))})
	}
	detail := fmt.Sprintf("permits: %d acquires (%s); reservations: %d (%s)", len(permits), pc.String("taken"), len(reservations), rc.String("made"))
	return v, detail
}

// outcomeCount sorts a workload's calls by how they ended.
type outcomeCount struct{ made, refused, failed, unknown int }

func (c *outcomeCount) add(o checker.Outcome, made bool) {
	switch {
	case o == checker.OutcomeOK && made:
		c.made++
	case o == checker.OutcomeOK:
		c.refused++
	case o == checker.OutcomeUnknown:
		c.unknown++
	default:
		c.failed++
	}
}

func (c outcomeCount) String(made string) string {
	return fmt.Sprintf("%d %s, %d refused, %d failed, %d unknown", c.made, made, c.refused, c.failed, c.unknown)
}
