package cluster_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/httpapi/apitest"
	"github.com/rlnode/rlnode/policy"
)

// hangingPeers makes requests from one node to a frozen node's HTTP address
// wait until their context ends, as a stopped process (it takes the
// connection and answers nothing) makes them.
type hangingPeers struct {
	mu     sync.Mutex
	frozen map[string]bool
}

func (h *hangingPeers) wrap(_ string, rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		h.mu.Lock()
		frozen := h.frozen[r.URL.Host]
		h.mu.Unlock()
		if frozen {
			<-r.Context().Done()
			return nil, r.Context().Err()
		}
		return rt.RoundTrip(r)
	})
}

// A follower's grant (what the node holder and the lease API ask) while
// the leader hangs: the forward that gets no answer fails fast instead of
// holding the caller for ApplyTimeout (3 s), and the grant is asked again
// of the leader the others elect. Before the per-attempt budget the grant
// failed after its whole 2.5 s context.
func TestGrantSkipsAHungLeader(t *testing.T) {
	h := &hangingPeers{frozen: map[string]bool{}}
	c := apitest.Start(t, 3, clustertest.Options{WrapPeer: h.wrap,
		Policies: []policy.Policy{leasedPolicy("lf", "fixed_window", 1000, time.Minute)}})
	leader := c.Leader(5 * time.Second)
	c.WaitConverged(5 * time.Second)
	follower := c.Followers(leader)[0]
	ctx := context.Background()
	if _, err := follower.Leases().Grant(ctx, cluster.GrantRequest{Policy: "lf", Client: "k", Holder: "app", Want: 1}); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	h.frozen[leader.HTTPAddr] = true
	h.mu.Unlock()
	c.Isolate(leader) // its Raft links too: the others elect a new leader

	gctx, cancel := context.WithTimeout(ctx, 2500*time.Millisecond)
	defer cancel()
	start := time.Now()
	g, err := follower.Leases().Grant(gctx, cluster.GrantRequest{Policy: "lf", Client: "k", Holder: "app", Want: 1})
	if err != nil || g.Units != 1 {
		t.Fatalf("grant with the leader hung: %+v %v (after %s)", g, err, time.Since(start).Round(time.Millisecond))
	}
	t.Logf("granted after %s, by the new leader", time.Since(start).Round(time.Millisecond))
}
