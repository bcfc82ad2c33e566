package client_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlnode/rlnode/client"
	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/httpapi/apitest"
	"github.com/rlnode/rlnode/policy"
)

// freezer stands in for SIGSTOP on a node as its clients see it: while an
// address is frozen, connections to it reach a listener that takes every
// request (the kernel of a stopped process still accepts and buffers) and
// never answers.
type freezer struct {
	t      *testing.T
	hung   net.Listener
	mu     sync.Mutex
	frozen map[string]bool
	paths  []string // requests the hung listener took, in order
	conns  []net.Conn
	tr     *http.Transport
}

func newFreezer(t *testing.T) *freezer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{t: t, hung: l, frozen: map[string]bool{}}
	go f.accept()
	t.Cleanup(func() {
		l.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
	})
	return f
}

func (f *freezer) accept() {
	for {
		c, err := f.hung.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.conns = append(f.conns, c)
		f.mu.Unlock()
		go func() {
			r := bufio.NewReader(c)
			for {
				req, err := http.ReadRequest(r)
				if err != nil {
					return
				}
				f.mu.Lock()
				f.paths = append(f.paths, req.URL.Path)
				f.mu.Unlock()
			}
		}()
	}
}

func (f *freezer) freeze(addr string, on bool) {
	f.mu.Lock()
	f.frozen[addr] = on
	f.mu.Unlock()
}

// took counts the requests the hung listener took whose path starts with
// prefix.
func (f *freezer) took(prefix string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, p := range f.paths {
		if strings.HasPrefix(p, prefix) {
			n++
		}
	}
	return n
}

// transport dials the hung listener for frozen addresses; served counts
// the requests that reached each real node.
func (f *freezer) transport(served map[string]int, mu *sync.Mutex) http.RoundTripper {
	d := &net.Dialer{Timeout: time.Second}
	tr := &http.Transport{MaxIdleConnsPerHost: 16, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		f.mu.Lock()
		frozen := f.frozen[addr]
		f.mu.Unlock()
		if frozen {
			return d.DialContext(ctx, network, f.hung.Addr().String())
		}
		return d.DialContext(ctx, network, addr)
	}}
	f.tr = tr
	return countingTransport{tr, served, mu}
}

type countingTransport struct {
	rt     http.RoundTripper
	served map[string]int
	mu     *sync.Mutex
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasPrefix(r.URL.Path, "/check") {
		c.mu.Lock()
		c.served[r.URL.Host]++
		c.mu.Unlock()
	}
	return c.rt.RoundTrip(r)
}

// A leader that hangs (takes requests, answers none) costs the client one
// attempt budget once: that check goes on to the next node and succeeds,
// later checks skip the hung node without asking it, and once it answers
// again (its probe succeeds) the client goes back to it. Before the
// per-attempt budget, the first check waited out the whole call timeout
// and failed with "may or may not have counted".
func TestCheckSkipsAHungNode(t *testing.T) {
	cl := apitest.Start(t, 3, clustertest.Options{Limit: 1000, Window: time.Hour})
	leader := cl.Leader(10 * time.Second)
	cl.WaitConverged(10 * time.Second)
	addrs := []string{leader.HTTPAddr}
	for _, f := range cl.Followers(leader) {
		addrs = append(addrs, f.HTTPAddr)
	}
	f := newFreezer(t)
	var mu sync.Mutex
	served := map[string]int{}
	c := newClient(t, client.Config{Addrs: addrs, Timeout: 2 * time.Second, RefreshInterval: 200 * time.Millisecond,
		Transport: f.transport(served, &mu)})
	ctx := context.Background()
	if _, err := c.Check(ctx, "default", "warm", 1); err != nil {
		t.Fatal(err)
	}
	f.freeze(leader.HTTPAddr, true)
	// A stopped process keeps its established connections open, and they
	// answer nothing either; dial afresh so they reach the hung listener.
	f.tr.CloseIdleConnections()

	for i := 0; i < 30; i++ {
		res, err := c.Check(ctx, "default", "k", 1)
		if err != nil {
			t.Fatalf("check %d with the leader hung: %v", i, err)
		}
		if !res.Allowed {
			t.Fatalf("check %d: refused: %+v", i, res)
		}
	}
	if n := f.took("/check"); n != 1 {
		t.Fatalf("the hung leader was sent %d checks; want 1 (the first, then it is skipped until it answers)", n)
	}

	f.freeze(leader.HTTPAddr, false)
	mu.Lock()
	before := served[leader.HTTPAddr]
	mu.Unlock()
	clustertest.Poll(t, 10*time.Second, func() error {
		if _, err := c.Check(ctx, "default", "k", 1); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if served[leader.HTTPAddr] == before {
			return errors.New("the leader answers again but the client does not go back to it")
		}
		return nil
	})
}

// When the cluster does not answer, callers waiting on a grant fetch that
// another caller started get an error (the middleware's fail mode then
// decides), never a refusal: before, every caller but the one that started
// the fetch got Allowed=false with no error.
func TestLocalFailedFetchIsAnErrorToWaiters(t *testing.T) {
	cl := apitest.Start(t, 3, clustertest.Options{Policies: []policy.Policy{leased("api", 1000, time.Minute)}})
	cl.Leader(10 * time.Second)
	cl.WaitConverged(10 * time.Second)
	f := newFreezer(t)
	var addrs []string
	for _, n := range cl.Nodes {
		addrs = append(addrs, n.HTTPAddr)
		f.freeze(n.HTTPAddr, true)
	}
	var mu sync.Mutex
	c := newClient(t, client.Config{Addrs: addrs, Timeout: 600 * time.Millisecond, AttemptTimeout: 100 * time.Millisecond,
		Transport: f.transport(map[string]int{}, &mu)})
	l, err := client.NewLocal(c, client.LocalConfig{HotAfter: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		l.Close(ctx)
	})
	var wg sync.WaitGroup
	var refused, errs atomic.Int32
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := l.Allow(context.Background(), "api", "k")
			switch {
			case err != nil:
				errs.Add(1)
			case !r.Allowed:
				refused.Add(1)
			default:
				t.Errorf("allowed with every node hung: %+v", r)
			}
		}()
	}
	wg.Wait()
	if refused.Load() > 0 {
		t.Fatalf("%d of 8 callers were refused (Allowed=false) because a grant fetch failed; want errors (%d were)", refused.Load(), errs.Load())
	}
}
