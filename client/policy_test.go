package client_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/rlnode/rlnode/client"
	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/httpapi/apitest"
	"github.com/rlnode/rlnode/policy"
)

const token = "client-test-token"

// Named policies, several limits, all-or-nothing CheckAll, Peek and Reset
// through the client against a three-node cluster, asked through a
// follower.
func TestPoliciesCheckAllPeekReset(t *testing.T) {
	api := policy.Policy{Name: "api", Algorithm: "fixed_window", Limits: []policy.Limit{
		{Limit: 3, Window: policy.Duration(time.Minute)}, {Limit: 5, Window: policy.Duration(time.Hour)}}}
	cl := apitest.Start(t, 3, clustertest.Options{Token: token, Policies: []policy.Policy{
		api, policy.Fixed("user", 2, time.Minute), policy.Fixed("org", 1, time.Minute)}})
	leader := cl.Leader(10 * time.Second)
	c := newClient(t, client.Config{Addrs: []string{cl.Followers(leader)[0].HTTPAddr}, Token: token})
	ctx := context.Background()

	res, err := c.Check(ctx, "api", "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Allowed || len(res.Limits) != 2 || res.Limits[0].Remaining != 2 || res.Limits[1].Remaining != 4 ||
		res.Limits[1].Window != time.Hour || res.Remaining != 2 || res.Limit != 3 {
		t.Fatalf("two limits: %+v", res)
	}
	st, err := c.Peek(ctx, "api", "k")
	if err != nil || st.Remaining != 2 || len(st.Limits) != 2 {
		t.Fatalf("peek: %+v %v", st, err)
	}
	if st2, _ := c.Peek(ctx, "api", "k"); st2.Remaining != 2 {
		t.Fatalf("a peek counted: %+v", st2)
	}

	// All or nothing: the organisation is over, so the user spends nothing.
	m, err := c.CheckAll(ctx, client.Hit{Policy: "user", Key: "u1"}, client.Hit{Policy: "org", Key: "o1"})
	if err != nil || !m.Allowed || len(m.Results) != 2 {
		t.Fatalf("first CheckAll: %+v %v", m, err)
	}
	m, err = c.CheckAll(ctx, client.Hit{Policy: "user", Key: "u1"}, client.Hit{Policy: "org", Key: "o1"})
	if err != nil || m.Allowed || !m.Results[0].Allowed || m.Results[1].Allowed || m.Results[1].RetryAfter <= 0 {
		t.Fatalf("second CheckAll: %+v %v", m, err)
	}
	if r, err := c.Check(ctx, "user", "u1", 1); err != nil || !r.Allowed || r.Remaining != 0 {
		t.Fatalf("the refused CheckAll spent the user's budget: %+v %v", r, err)
	}

	// Reset needs the token and gives the key its whole budget back.
	noToken := newClient(t, client.Config{Addrs: []string{leader.HTTPAddr}})
	if err := noToken.Reset(ctx, "user", "u1"); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("reset without the token: %v", err)
	}
	if err := c.Reset(ctx, "user", "u1"); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Check(ctx, "user", "u1", 1); err != nil || r.Remaining != 1 {
		t.Fatalf("after reset: %+v %v", r, err)
	}

	if _, err := c.Check(ctx, "nope", "k", 1); !errors.Is(err, client.ErrUnknownPolicy) {
		t.Fatalf("unknown policy: %v", err)
	}
	if _, err := c.CheckAll(ctx, client.Hit{Policy: "user", Key: "u2"}, client.Hit{Policy: "nope", Key: "x"}); !errors.Is(err, client.ErrUnknownPolicy) {
		t.Fatalf("CheckAll with an unknown policy: %v", err)
	}
	if _, err := c.Check(ctx, "api", "k", 4); !errors.Is(err, client.ErrCostExceedsLimit) {
		t.Fatalf("cost 4 of 3: %v", err)
	}

	// The middleware lists every limit in the headers.
	hdr := http.Header{}
	client.SetHeaders(hdr, res)
	if got := hdr.Get("RateLimit-Policy"); got != `"api-1m";q=3;w=60, "api-1h";q=5;w=3600` {
		t.Fatalf("RateLimit-Policy %q", got)
	}
}
