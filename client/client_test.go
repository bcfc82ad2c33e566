package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/client"
	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/httpapi/apitest"
)

func newClient(t *testing.T, cfg client.Config) *client.Client {
	t.Helper()
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, cfg := range []client.Config{{}, {Addrs: []string{"no-port"}}, {Addrs: []string{"127.0.0.1:1"}, Timeout: -time.Second}} {
		if _, err := client.New(cfg); err == nil {
			t.Errorf("New(%+v): no error", cfg)
		}
	}
}

// A client given one follower learns the cluster, puts the leader first,
// and spends a key's budget down to a typed refusal.
func TestCheckFollowsTheCluster(t *testing.T) {
	cl := apitest.Start(t, 3, clustertest.Options{Limit: 3, Window: time.Minute})
	leader := cl.Leader(10 * time.Second)
	cl.WaitConverged(10 * time.Second)
	follower := cl.Followers(leader)[0]
	c := newClient(t, client.Config{Addrs: []string{follower.HTTPAddr}})
	ctx := context.Background()

	for want := int64(2); want >= 0; want-- {
		res, err := c.Check(ctx, "default", "alice", 1)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Allowed || res.Remaining != want || res.Limit != 3 || res.Window != time.Minute || res.Policy != "default" {
			t.Fatalf("hit: %+v, want allowed with remaining %d of 3 per 1m", res, want)
		}
		if res.ServedBy != leader.ID || time.Until(res.ResetAt) <= 0 {
			t.Fatalf("hit: served by %q reset at %v, want %s and a future reset", res.ServedBy, res.ResetAt, leader.ID)
		}
	}
	res, err := c.Check(ctx, "default", "alice", 1)
	if err != nil {
		t.Fatal(err)
	}
	if res.Allowed || res.Remaining != 0 || res.RetryAfter <= 0 || res.RetryAfter > time.Minute {
		t.Fatalf("fourth hit: %+v, want refused with a retry-after within the window", res)
	}
	members := c.Members()
	if len(members) != 3 || members[0] != leader.HTTPAddr {
		t.Fatalf("members %v: want all three with the leader %s first", members, leader.HTTPAddr)
	}
	// A cost above the limit can never pass: a typed error, not a refusal.
	if _, err := c.Check(ctx, "default", "bob", 4); !errors.Is(err, client.ErrCostExceedsLimit) {
		t.Fatalf("cost 4 of 3: err %v, want ErrCostExceedsLimit", err)
	}
	var e *client.Error
	if _, err := c.Check(ctx, "default", "bob", 4); !errors.As(err, &e) || e.Status != http.StatusUnprocessableEntity {
		t.Fatalf("cost 4 of 3: err %#v, want *client.Error with status 422", err)
	}
}

// A node that cannot be reached did not count the hit: the client moves on
// to the next one.
func TestCheckSkipsDeadNodes(t *testing.T) {
	cl := apitest.Start(t, 3, clustertest.Options{Limit: 5, Window: time.Minute})
	c := newClient(t, client.Config{Addrs: []string{deadAddr(t), deadAddr(t), cl.Nodes[2].HTTPAddr}, RefreshInterval: time.Hour})
	res, err := c.Check(context.Background(), "default", "k", 2)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Allowed || res.Remaining != 3 {
		t.Fatalf("%+v: want allowed, remaining 3", res)
	}
}

// With no node reachable the call ends at the timeout with a not-counted
// error that names the node.
func TestCheckNothingReachable(t *testing.T) {
	c := newClient(t, client.Config{Addrs: []string{deadAddr(t), deadAddr(t)}, Timeout: 300 * time.Millisecond})
	start := time.Now()
	_, err := c.Check(context.Background(), "default", "k", 1)
	if !errors.Is(err, client.ErrNotCounted) || errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("err %v: want ErrNotCounted", err)
	}
	if time.Since(start) > 3*time.Second {
		t.Fatalf("took %s with a 300ms timeout", time.Since(start))
	}
}

// A cluster that lost its majority has no leader: the client reports
// ErrNoLeader (which is also ErrNotCounted) rather than hanging.
func TestCheckNoLeader(t *testing.T) {
	cl := apitest.Start(t, 3, clustertest.Options{Limit: 5, Window: time.Minute})
	leader := cl.Leader(10 * time.Second)
	fs := cl.Followers(leader)
	fs[0].Stop()
	fs[1].Stop()
	c := newClient(t, client.Config{Addrs: []string{leader.HTTPAddr}, Timeout: 3 * time.Second})
	clustertest.Poll(t, 10*time.Second, func() error {
		_, err := c.Check(context.Background(), "default", "k", 1)
		if errors.Is(err, client.ErrNotCounted) {
			return nil
		}
		return errors.New("still deciding without a majority: " + errString(err))
	})
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// Traffic from many goroutines while the leader is cut off: never more
// admissions than the limit, and every failure is one of the documented
// typed errors.
func TestLeaderLossMidTraffic(t *testing.T) {
	const limit = 70
	cl := apitest.Start(t, 3, clustertest.Options{Limit: limit, Window: time.Hour})
	leader := cl.Leader(10 * time.Second)
	var addrs []string
	for _, n := range cl.Nodes {
		addrs = append(addrs, n.HTTPAddr)
	}
	c := newClient(t, client.Config{Addrs: addrs, Timeout: 3 * time.Second})

	type outcome struct {
		allowed bool
		err     error
	}
	outs := make(chan outcome, 1000)
	stopLeader := make(chan struct{})
	done := make(chan struct{})
	const workers, perWorker = 6, 20
	for w := 0; w < workers; w++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := 0; i < perWorker; i++ {
				if i == 4 && w == 0 {
					close(stopLeader)
				}
				res, err := c.Check(context.Background(), "default", "shared", 1)
				outs <- outcome{res.Allowed, err}
			}
		}()
	}
	<-stopLeader
	// Cut every link of the leader at once, mid-traffic.
	cl.Isolate(leader)
	for w := 0; w < workers; w++ {
		<-done
	}
	close(outs)
	var allowed, refused, unknown, notCounted int
	for o := range outs {
		switch {
		case o.err == nil && o.allowed:
			allowed++
		case o.err == nil:
			refused++
		case errors.Is(o.err, client.ErrOutcomeUnknown):
			unknown++
		case errors.Is(o.err, client.ErrNotCounted):
			notCounted++
		default:
			t.Errorf("undocumented error: %v", o.err)
		}
	}
	t.Logf("allowed %d, refused %d, outcome unknown %d, not counted %d", allowed, refused, unknown, notCounted)
	if allowed > limit {
		t.Fatalf("%d hits allowed with a limit of %d", allowed, limit)
	}
	if allowed+refused == 0 {
		t.Fatal("no decision at all")
	}
	// The survivors elect a leader and the client follows it.
	clustertest.Poll(t, 15*time.Second, func() error {
		_, err := c.Check(context.Background(), "default", "after", 1)
		return err
	})
	if slices.Contains(c.Members()[:1], leader.HTTPAddr) {
		t.Fatalf("members %v still start with the stopped leader", c.Members())
	}
}

// Bad arguments fail before any request, with a message that says why.
func TestBadArguments(t *testing.T) {
	c := newClient(t, client.Config{Addrs: []string{deadAddr(t)}})
	ctx := context.Background()
	for name, err := range map[string]error{
		"empty key":      func() error { _, err := c.Check(ctx, "p", "", 1); return err }(),
		"negative cost":  func() error { _, err := c.Check(ctx, "p", "k", -1); return err }(),
		"no hits":        func() error { _, err := c.CheckAll(ctx); return err }(),
		"peek empty key": func() error { _, err := c.Peek(ctx, "p", ""); return err }(),
		"reset no key":   c.Reset(ctx, "p", ""),
	} {
		if !errors.Is(err, client.ErrInvalid) || strings.Contains(err.Error(), "answered") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
