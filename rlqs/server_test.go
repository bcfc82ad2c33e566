package rlqs_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/httpapi/apitest"
	"github.com/rlnode/rlnode/policy"
	"github.com/rlnode/rlnode/rlqs"
	"github.com/rlnode/rlnode/rlqs/rlqstest"
)

func leased(name string, limit int64, window time.Duration) policy.Policy {
	p := policy.Fixed(name, limit, window)
	p.Consistency = policy.Leased
	return p
}

// serve starts a quota server on node, on a loopback port.
func serve(t *testing.T, node *clustertest.Node, cfg rlqs.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Node = node.Node
	s := rlqs.New(cfg)
	go s.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Stop(ctx)
	})
	return ln.Addr().String()
}

func startEnvoy(t *testing.T, cfg rlqstest.Config) *rlqstest.Envoy {
	t.Helper()
	e, err := rlqstest.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

func TestKeyOf(t *testing.T) {
	for _, tc := range []struct {
		domain         string
		id             map[string]string
		policy, client string
	}{
		{"d", map[string]string{"policy": "api", "tenant": "acme", "path": "/x"}, "api", "path=/x&tenant=acme"},
		{"api", map[string]string{"tenant": "acme"}, "api", "tenant=acme"},
		{"d", map[string]string{"policy": "api"}, "api", rlqs.AllClients},
	} {
		p, c, err := rlqs.KeyOf(tc.domain, tc.id)
		if err != nil || p != tc.policy || c != tc.client {
			t.Errorf("KeyOf(%q, %v) = %q, %q, %v; want %q, %q", tc.domain, tc.id, p, c, err, tc.policy, tc.client)
		}
	}
	if _, _, err := rlqs.KeyOf("", map[string]string{"tenant": "a"}); err == nil {
		t.Error("a bucket without policy or domain mapped onto a key")
	}
}

// Three Envoys, each streaming to a different node, hammer one bucket of
// a leased policy: together they never admit more than the limit, their
// assignments are token buckets backed by grants, the bucket is abandoned
// when it goes cold, and when the node an Envoy talks to is cut off its
// assignment runs out at its TTL and the expired behaviour (deny) applies.
func TestEnvoysShareOneBucketNeverOverTheLimit(t *testing.T) {
	const limit = 300
	cl := apitest.Start(t, 3, clustertest.Options{Policies: []policy.Policy{leased("api", limit, time.Hour)}})
	cl.Leader(10 * time.Second)
	cl.WaitConverged(10 * time.Second)
	bucket := map[string]string{"policy": "api", "tenant": "acme"}
	var envoys []*rlqstest.Envoy
	for _, n := range cl.Nodes {
		addr := serve(t, n, rlqs.Config{Lease: time.Second, Transit: 20 * time.Millisecond, ColdAfter: 1500 * time.Millisecond})
		envoys = append(envoys, startEnvoy(t, rlqstest.Config{Addr: addr, Domain: "edge", Interval: 200 * time.Millisecond}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, e := range envoys {
		e.Allow(bucket) // the first request reports the bucket
		if err := e.WaitAssigned(ctx, bucket); err != nil {
			t.Fatal(err)
		}
	}

	var allowed atomic.Int64
	hammer := func(d time.Duration) {
		var wg sync.WaitGroup
		end := time.Now().Add(d)
		for _, e := range envoys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(end) {
					if e.Allow(bucket) {
						allowed.Add(1)
					}
					time.Sleep(time.Millisecond)
				}
			}()
		}
		wg.Wait()
	}
	hammer(3 * time.Second)
	if n := allowed.Load(); n > limit || n < limit/3 {
		t.Fatalf("%d requests allowed across three Envoys, limit %d: want at most the limit and most of it", n, limit)
	}
	t.Logf("%d of %d allowed", allowed.Load(), limit)
	if a, _, _ := envoys[0].Counts(); a < 2 {
		t.Fatalf("%d assignments: the server should renew before the TTL", a)
	}

	// Silence: every Envoy's bucket goes cold and is abandoned.
	clustertest.Poll(t, 20*time.Second, func() error {
		for _, e := range envoys {
			if _, ab, _ := e.Counts(); ab == 0 {
				return context.DeadlineExceeded
			}
		}
		return nil
	})
}

// An Envoy whose node is cut off from the cluster gets no renewal: its
// assignment expires at its TTL and the expired behaviour applies.
func TestAssignmentExpiresWhenTheClusterIsGone(t *testing.T) {
	cl := apitest.Start(t, 3, clustertest.Options{Policies: []policy.Policy{leased("api", 1000000, time.Hour)}})
	leader := cl.Leader(10 * time.Second)
	cl.WaitConverged(10 * time.Second)
	follower := cl.Followers(leader)[0]
	addr := serve(t, follower, rlqs.Config{Lease: time.Second, Transit: 20 * time.Millisecond})
	e := startEnvoy(t, rlqstest.Config{Addr: addr, Domain: "api", Interval: 200 * time.Millisecond})
	bucket := map[string]string{"tenant": "acme"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e.Allow(bucket)
	if err := e.WaitAssigned(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	cl.Isolate(follower)
	cut := time.Now()
	clustertest.Poll(t, 20*time.Second, func() error {
		e.Allow(bucket)
		if _, _, exp := e.Counts(); exp == 0 {
			return context.DeadlineExceeded
		}
		return nil
	})
	if waited := time.Since(cut); waited > 5*time.Second {
		t.Fatalf("the assignment lasted %s after the cut, longer than its lease", waited)
	}
	for i := 0; i < 5; i++ {
		if e.Allow(bucket) {
			t.Fatal("a request was allowed after the assignment expired (expired behaviour: deny)")
		}
	}
}

// A node removed from the cluster can grant nothing: it ends its streams
// with UNAVAILABLE so each Envoy reconnects, through its cluster, to a
// node that can, rather than waiting on a node that will never assign.
func TestStreamEndsWhenItsNodeIsRemoved(t *testing.T) {
	cl := apitest.Start(t, 3, clustertest.Options{Policies: []policy.Policy{leased("api", 1000000, time.Hour)}})
	leader := cl.Leader(10 * time.Second)
	cl.WaitConverged(10 * time.Second)
	follower := cl.Followers(leader)[0]
	addr := serve(t, follower, rlqs.Config{Lease: 300 * time.Millisecond, Transit: 20 * time.Millisecond})
	e := startEnvoy(t, rlqstest.Config{Addr: addr, Domain: "api", Interval: 100 * time.Millisecond})
	bucket := map[string]string{"tenant": "acme"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e.Allow(bucket)
	if err := e.WaitAssigned(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	if err := leader.Node.Remove(ctx, follower.ID); err != nil {
		t.Fatal(err)
	}
	clustertest.Poll(t, 10*time.Second, func() error {
		e.Allow(bucket)
		if e.Ended() == nil {
			return errors.New("the stream to the removed node still runs")
		}
		return nil
	})
	if got := status.Code(e.Ended()); got != codes.Unavailable {
		t.Fatalf("stream ended with %v (%v), want Unavailable", got, e.Ended())
	}
}
