package rls

import (
	"context"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/rlnode/rlnode/cluster"
)

// leanLimiter is fakeLimiter with the node's lean path: what CheckOne was
// asked, and what it answers.
type leanLimiter struct {
	*fakeLimiter
	one   []cluster.Hit
	never bool // answer NeverAllowed, as the node does for a cost above the limit
}

func (l *leanLimiter) CheckOne(_ context.Context, vh cluster.ValidHit, timeout time.Duration, res *cluster.OneResult) error {
	*res = cluster.OneResult{}
	l.one = append(l.one, vh.Hit())
	if timeout <= 0 {
		panic("CheckOne asked without a timeout: a hit through the log would wait for ever")
	}
	if l.never {
		res.NeverAllowed = true
		return nil
	}
	r, err := l.decide([]cluster.Hit{vh.Hit()})
	res.CheckResult = r
	return err
}

const twoKeyConfig = `
domain: web
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 5}
`

// A request of one enforcing descriptor is one CheckOne call into the node
// (the path of GET /check: a leased hot key from the lease); a request of
// several stays one all-or-nothing CheckAll; a hit CheckOne would answer
// otherwise than CheckAll (a cost no limit allows) goes to CheckAll.
func TestOneDescriptorIsOneLeanCall(t *testing.T) {
	f := &fakeLimiter{policies: envoyPolicies(t, twoKeyConfig), decide: decided(true, 1)}
	l := &leanLimiter{fakeLimiter: f}
	s := New(Config{Limiter: l})

	resp, err := s.ShouldRateLimit(context.Background(), request("alice"))
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[0].GetLimitRemaining() != 1 {
		t.Fatalf("one descriptor: %v %v", resp, err)
	}
	if len(l.one) != 1 || l.one[0].Client != "user_alice" || len(f.asked) != 0 {
		t.Fatalf("one descriptor: CheckOne asked %v, CheckAll %v; want one CheckOne call only", l.one, f.asked)
	}

	two := &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*commonv3.RateLimitDescriptor{
		{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "user", Value: "bob"}}},
		{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "path", Value: "/x"}}},
	}}
	if _, err := s.ShouldRateLimit(context.Background(), two); err != nil {
		t.Fatal(err)
	}
	if len(l.one) != 1 || len(f.asked) != 1 || len(f.asked[0]) != 2 {
		t.Fatalf("two descriptors: CheckOne asked %v, CheckAll %v; want one CheckAll of both", l.one, f.asked)
	}
	// The node may read a group after it answered (a batch that took it):
	// what CheckAll was handed is never the pooled room a later request
	// writes.
	s.ShouldRateLimit(context.Background(), request("carol"))
	if f.asked[0][0].Client != "user_bob" || f.asked[0][1].Client != "path_/x" {
		t.Fatalf("the hits CheckAll was handed changed after it answered: %v", f.asked[0])
	}

	l.never, f.asked = true, nil
	f.decide = decided(false, 0)
	resp, err = s.ShouldRateLimit(context.Background(), request("dave"))
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("never allowed: %v %v", resp, err)
	}
	if len(f.asked) != 1 {
		t.Fatalf("a cost the table never allows: CheckAll asked %v; want the log's answer, as before", f.asked)
	}
}
