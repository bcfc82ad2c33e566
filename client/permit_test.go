package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlnode/rlnode/client"
	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/httpapi/apitest"
	"github.com/rlnode/rlnode/policy"
)

func permitCluster(t *testing.T, ps ...policy.Policy) *clustertest.Cluster {
	cl := apitest.Start(t, 1, clustertest.Options{Policies: ps})
	cl.Leader(10 * time.Second)
	return cl
}

// TestAcquireReleaseRenew: the Go client's permits, bound to its token.
func TestAcquireReleaseRenew(t *testing.T) {
	cl := permitCluster(t, policy.Policy{Name: "jobs", Algorithm: policy.Concurrency, Limits: []policy.Limit{{Limit: 1}}})
	addr := cl.Live()[0].HTTPAddr
	c := newClient(t, client.Config{Addrs: []string{addr}, Token: "app-a"})
	other := newClient(t, client.Config{Addrs: []string{addr}, Token: "app-b"})
	ctx := context.Background()
	p, err := c.Acquire(ctx, "jobs", "u1", 10*time.Second)
	if err != nil || !p.Acquired || len(p.ID) != 32 || time.Until(p.ExpiresAt) > 11*time.Second {
		t.Fatalf("acquire: %+v %v", p, err)
	}
	full, err := other.Acquire(ctx, "jobs", "u1", time.Second)
	if err != nil || full.Acquired || full.RetryAfter <= 9*time.Second {
		t.Fatalf("second of 1: %+v %v", full, err)
	}
	if err := other.Release(ctx, p.ID); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("release by another token: %v", err)
	}
	if r, err := c.Renew(ctx, p.ID, time.Minute); err != nil || time.Until(r.ExpiresAt) < 50*time.Second {
		t.Fatalf("renew: %+v %v", r, err)
	}
	if err := c.Release(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctx, p.ID); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("second release: %v", err)
	}
	if p, err := other.Acquire(ctx, "jobs", "u1", time.Second); err != nil || !p.Acquired {
		t.Fatalf("acquire after the release: %+v %v", p, err)
	}
}

// TestReserveSettle: an LLM call's estimate reserved on two budgets and
// settled at the real cost.
func TestReserveSettle(t *testing.T) {
	cl := permitCluster(t, policy.Fixed("tokens-min", 1000, time.Minute), policy.Fixed("tokens-day", 1500, 24*time.Hour))
	c := newClient(t, client.Config{Addrs: []string{cl.Live()[0].HTTPAddr}})
	ctx := context.Background()
	keys := []client.ReserveKey{{Policy: "tokens-min", Key: "u1", Units: 800}, {Policy: "tokens-day", Key: "u1", Units: 800}}
	r, err := c.Reserve(ctx, time.Minute, keys...)
	if err != nil || !r.Reserved || len(r.Keys) != 2 || r.Keys[0].Remaining != 200 {
		t.Fatalf("reserve: %+v %v", r, err)
	}
	if r2, err := c.Reserve(ctx, time.Minute, keys...); err != nil || r2.Reserved || r2.RetryAfter <= 0 {
		t.Fatalf("second reserve of 800 with 200 left: %+v %v", r2, err)
	}
	s, err := c.Settle(ctx, r.ID, 100)
	if err != nil || s.Refunded[0] != 700 || s.Refunded[1] != 700 {
		t.Fatalf("settle: %+v %v", s, err)
	}
	if _, err := c.Settle(ctx, r.ID, 100); !errors.Is(err, client.ErrAlreadySettled) {
		t.Fatalf("second settle: %v", err)
	}
	if r, err := c.Reserve(ctx, time.Minute, keys...); err != nil || !r.Reserved {
		t.Fatalf("reserve after the settle gave back 700: %+v %v", r, err)
	}
}

// TestConcurrencyMiddleware: at most the limit of requests of a key run at
// once; each permit is released when its request ends.
func TestConcurrencyMiddleware(t *testing.T) {
	cl := permitCluster(t, policy.Policy{Name: "inflight", Algorithm: policy.Concurrency, Limits: []policy.Limit{{Limit: 2}}})
	c := newClient(t, client.Config{Addrs: []string{cl.Live()[0].HTTPAddr}})
	var running, peak atomic.Int32
	gate := make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := running.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		<-gate
		running.Add(-1)
	})
	srv := httptest.NewServer(client.ConcurrencyMiddleware(c, "inflight", client.KeyHeader("X-User"), 30*time.Second)(slow))
	defer srv.Close()
	codes := make(chan int, 5)
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
			req.Header.Set("X-User", "u1")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				codes <- 0
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	// Three are refused while two hold their permits.
	refused := 0
	for refused < 3 {
		select {
		case code := <-codes:
			if code != http.StatusTooManyRequests {
				t.Fatalf("status %d while two requests run", code)
			}
			refused++
		case <-time.After(20 * time.Second):
			t.Fatalf("%d refused, want 3", refused)
		}
	}
	close(gate)
	wg.Wait()
	close(codes)
	for code := range codes {
		if code != http.StatusOK {
			t.Fatalf("a held request answered %d", code)
		}
	}
	if peak.Load() != 2 {
		t.Fatalf("peak concurrency %d, want 2", peak.Load())
	}
	// Released: the next request runs.
	if code := get(t, srv.URL, "X-User", "u1").status; code != http.StatusOK {
		t.Fatalf("after release: %d", code)
	}
}
