package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlnode/rlnode/client"
	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/httpapi/apitest"
	"github.com/rlnode/rlnode/policy"
)

// A node removed from the cluster answers not_member: the Client and
// client.Local take it as "not counted, try another node", as they do
// no_leader, and the call is decided by a member.
func TestRemovedNodeIsSkipped(t *testing.T) {
	cl := apitest.Start(t, 3, clustertest.Options{Limit: 100, Window: time.Minute,
		Policies: []policy.Policy{leased("api", 100, time.Minute)}})
	leader := cl.Leader(10 * time.Second)
	cl.WaitConverged(10 * time.Second)
	fs := cl.Followers(leader)
	removed, member := fs[0], fs[1]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := leader.Node.Remove(ctx, removed.ID); err != nil {
		t.Fatal(err)
	}
	clustertest.Poll(t, 10*time.Second, func() error {
		if _, gone := removed.Node.Removed(); !gone {
			return errors.New("the removed node does not know it yet")
		}
		return nil
	})
	// The client would learn the members from any node and put the
	// leader first; in front of the removed node a proxy names it the
	// leader, so every call meets its answer first.
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(&url.URL{Scheme: "http", Host: removed.HTTPAddr})
	}}
	var metRemoved atomic.Int64
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		metRemoved.Add(1)
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	frontAddr := strings.TrimPrefix(front.URL, "http://")
	peers := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `[{"id":"removed","httpAddr":%q,"leader":true},{"id":"member","httpAddr":%q}]`, frontAddr, member.HTTPAddr)
	}))
	t.Cleanup(peers.Close)
	c := newClient(t, client.Config{Addrs: []string{strings.TrimPrefix(peers.URL, "http://")}, RefreshInterval: time.Hour, Timeout: 5 * time.Second})
	res, err := c.Check(ctx, "default", "alice", 1)
	if err != nil || !res.Allowed || res.ServedBy == removed.ID {
		t.Fatalf("check: %+v %v, want allowed by a member", res, err)
	}
	if metRemoved.Load() == 0 {
		t.Fatal("the call never met the removed node")
	}
	l, err := client.NewLocal(c, client.LocalConfig{HotAfter: 1, Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	for i := 0; i < 5; i++ {
		if r, err := l.Allow(ctx, "api", "bob"); err != nil || !r.Allowed {
			t.Fatalf("local allow %d: %+v %v, want allowed", i, r, err)
		}
	}
}
