package client_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/rlnode/rlnode/client"
	"github.com/rlnode/rlnode/client/ginrl"
	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/httpapi/apitest"
	"github.com/rlnode/rlnode/policy"
)

func leased(name string, limit int64, window time.Duration) policy.Policy {
	p := policy.Fixed(name, limit, window)
	p.Consistency = policy.Leased
	return p
}

// The lease API through a follower: a grant takes units out of the budget
// at once, a return puts unspent ones back, and bad requests are 4xx that
// name the problem and grant nothing.
func TestLeaseAPI(t *testing.T) {
	bucket := policy.Policy{Name: "bucket", Algorithm: "token_bucket", Consistency: policy.Leased,
		Limits: []policy.Limit{{Limit: 10, Window: policy.Duration(time.Second), Burst: 10}}}
	cl := apitest.Start(t, 3, clustertest.Options{Policies: []policy.Policy{
		leased("api", 10, time.Minute), policy.Fixed("strict", 10, time.Minute), bucket}})
	leader := cl.Leader(10 * time.Second)
	cl.WaitConverged(10 * time.Second)
	c := newClient(t, client.Config{Addrs: []string{cl.Followers(leader)[0].HTTPAddr}})
	ctx := context.Background()

	g, err := c.Lease(ctx, "api", "k", "app-1", 4, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if g.Units != 4 || g.ID == 0 || g.ValidFor <= 0 || g.ValidFor > time.Second || g.Limit != 10 || g.Window != time.Minute ||
		g.ResetAt.IsZero() || g.Deadline().Left(time.Now()) <= 0 {
		t.Fatalf("grant %+v: want 4 units of 10 per minute, valid for up to 1s", g)
	}
	if st, err := c.Peek(ctx, "api", "k"); err != nil || st.Remaining != 6 {
		t.Fatalf("after a grant of 4: %+v %v, want 6 remaining (granted units count as spent)", st, err)
	}
	if err := c.ReturnLease(ctx, g, 3); err != nil {
		t.Fatal(err)
	}
	if st, err := c.Peek(ctx, "api", "k"); err != nil || st.Remaining != 9 {
		t.Fatalf("after returning 3: %+v %v, want 9 remaining", st, err)
	}
	// Another credential (here: a bearer token) cannot return app-1's units.
	other := newClient(t, client.Config{Addrs: []string{leader.HTTPAddr}, Token: "someone-else"})
	if err := other.ReturnLease(ctx, g, 1); err != nil {
		t.Fatal(err)
	}
	if st, _ := c.Peek(ctx, "api", "k"); st.Remaining != 9 {
		t.Fatalf("a return under other credentials changed the budget: %+v", st)
	}

	// A token bucket's grant ends the cluster's max-clock-offset (500 ms
	// by default) early for its holder: its cap lifts at expiry in cluster
	// time, which a failover to a leader ahead in time moves earlier.
	tb, err := c.Lease(ctx, "bucket", "k", "app-1", 2, time.Minute)
	if err != nil || tb.Units != 2 || tb.ValidFor > time.Minute-500*time.Millisecond || tb.ValidFor < 50*time.Second {
		t.Fatalf("token-bucket grant %+v %v: want 2 units valid for at most 59.5s", tb, err)
	}

	for _, tc := range []struct {
		policy, holder string
		want           int64
		is             error
	}{
		{"nope", "h", 1, client.ErrUnknownPolicy},
		{"strict", "h", 1, client.ErrNotLeased},
		{"api", "h", 0, client.ErrInvalid},
		{"api", "", 1, client.ErrInvalid},
	} {
		_, err := c.Lease(ctx, tc.policy, "k", tc.holder, tc.want, 0)
		if !errors.Is(err, tc.is) {
			t.Errorf("lease %s holder %q want %d: %v, want %v", tc.policy, tc.holder, tc.want, err, tc.is)
		}
	}
	if st, _ := c.Peek(ctx, "api", "k"); st.Remaining != 9 {
		t.Fatalf("refused lease requests changed the budget: %+v", st)
	}
}

// Goroutines with separate holders share one key through client.Local on
// a three-node cluster; one holder stops for longer than its lease with
// units in hand, then one follower is cut off: no window admits more than
// the limit, no hit is admitted after its window, and most decisions are
// local.
func TestLocalHoldersShareOneKey(t *testing.T) {
	const limit = 50
	cl := apitest.Start(t, 3, clustertest.Options{Policies: []policy.Policy{leased("api", limit, 500*time.Millisecond)}})
	leader := cl.Leader(10 * time.Second)
	cl.WaitConverged(10 * time.Second)
	var addrs []string
	for _, n := range cl.Nodes {
		addrs = append(addrs, n.HTTPAddr)
	}
	c := newClient(t, client.Config{Addrs: addrs})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var mu sync.Mutex
	perWindow := map[time.Time]int{}
	var local, total atomic.Int64
	var pause atomic.Bool // holder 0 stops for longer than its lease, units in hand
	var wg sync.WaitGroup
	for h := 0; h < 4; h++ {
		l, err := client.NewLocal(c, client.LocalConfig{HotAfter: 2, MaxWant: 20, Lease: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer l.Close(context.Background())
			for ctx.Err() == nil {
				before := time.Now()
				r, err := l.Allow(ctx, "api", "shared")
				if err == nil && r.Allowed {
					if !before.Before(r.ResetAt) {
						t.Errorf("admitted at %v after its window ended at %v (%s)", before, r.ResetAt, r.ServedBy)
					}
					mu.Lock()
					perWindow[r.ResetAt]++
					mu.Unlock()
					total.Add(1)
					if r.ServedBy == "local:"+l.Holder() {
						local.Add(1)
					}
				}
				if h == 0 && err == nil && r.Allowed && r.Remaining > 0 && pause.CompareAndSwap(true, false) {
					time.Sleep(1500 * time.Millisecond)
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	waitFor := func(n int64) {
		t.Helper()
		base := total.Load()
		clustertest.Poll(t, 30*time.Second, func() error {
			if total.Load() < base+n {
				return errors.New("waiting for admissions")
			}
			return nil
		})
	}
	waitFor(3 * limit)
	pause.Store(true)
	waitFor(3 * limit)
	cl.Isolate(cl.Followers(leader)[0])
	waitFor(3 * limit)
	cl.Heal()
	waitFor(2 * limit)
	cancel()
	wg.Wait()

	for reset, n := range perWindow {
		if n > limit {
			t.Errorf("window ending %v admitted %d, limit %d", reset, n, limit)
		}
	}
	t.Logf("%d admissions in %d windows, %d local", total.Load(), len(perWindow), local.Load())
	if local.Load() == 0 {
		t.Fatal("no decision was local")
	}
}

// Middleware and the Gin adapter decide through Local when given
// WithLocal: a leased key's requests pass until the limit, then 429, and
// the hot ones are decided in the process.
func TestMiddlewareWithLocal(t *testing.T) {
	cl := apitest.Start(t, 1, clustertest.Options{Policies: []policy.Policy{leased("api", 5, time.Minute)}})
	cl.Leader(10 * time.Second)
	c := newClient(t, client.Config{Addrs: []string{cl.Nodes[0].HTTPAddr}})
	l, err := client.NewLocal(c, client.LocalConfig{HotAfter: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	var calls atomic.Int32
	srv := httptest.NewServer(client.Middleware(c, "api", client.KeyHeader("X-Api-Key"), client.WithLocal(l))(upstream(&calls)))
	defer srv.Close()
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	e.GET("/x", ginrl.Middleware(c, "api", client.KeyHeader("X-Api-Key"), client.WithLocal(l)), func(gc *gin.Context) {
		calls.Add(1)
		gc.JSON(200, gin.H{"ok": true})
	})
	gsrv := httptest.NewServer(e)
	defer gsrv.Close()

	ok, refused := 0, 0
	for i := 0; i < 8; i++ {
		url := srv.URL
		if i%2 == 1 {
			url = gsrv.URL + "/x"
		}
		switch r := get(t, url, "X-Api-Key", "k"); r.status {
		case 200:
			ok++
		case 429:
			refused++
			if r.header.Get("Retry-After") == "" {
				t.Fatalf("429 without Retry-After: %v", r.header)
			}
		default:
			t.Fatalf("status %d %v", r.status, r.body)
		}
	}
	if ok != 5 || refused != 3 || calls.Load() != 5 {
		t.Fatalf("%d passed, %d refused, upstream called %d times: want 5, 3, 5", ok, refused, calls.Load())
	}
}
