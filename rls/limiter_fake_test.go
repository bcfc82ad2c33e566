package rls

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/policy"
	"github.com/rlnode/rlnode/window"
)

// fakeLimiter is the cluster as the service sees it (Limiter), with
// every decision made by the test (envoyproxy/ratelimit's service tests
// against a mocked limiter are the model).
type fakeLimiter struct {
	policies []policy.Policy
	decide   func(hits []cluster.Hit) (cluster.CheckResult, error)
	asked    [][]cluster.Hit
}

func (f *fakeLimiter) CheckAll(_ context.Context, hits []cluster.Hit) (cluster.CheckResult, error) {
	f.asked = append(f.asked, hits)
	return f.decide(hits)
}
func (f *fakeLimiter) Policies() []policy.Policy { return f.policies }
func (f *fakeLimiter) PolicyVersion() uint64     { return 1 }
func (f *fakeLimiter) Policy(name string) (policy.Policy, bool) {
	for _, p := range f.policies {
		if p.Name == name {
			return p, true
		}
	}
	return policy.Policy{}, false
}
func (f *fakeLimiter) SetPolicy(context.Context, policy.Policy) (string, error) {
	return "", errors.New("not in this test")
}
func (f *fakeLimiter) Ready(time.Duration) error { return nil }
func (f *fakeLimiter) Removed() (string, bool)   { return "", false }
func (f *fakeLimiter) Peek(context.Context, string, string, bool) (cluster.PeekResult, error) {
	return cluster.PeekResult{}, errors.New("not in this test")
}
func (f *fakeLimiter) Refund(context.Context, []cluster.Hit) ([]int64, error) {
	return nil, errors.New("not in this test")
}

// envoyPolicies is the policy table an import of an envoyproxy/ratelimit
// config makes.
func envoyPolicies(t testing.TB, config string) []policy.Policy {
	t.Helper()
	_, rules, err := policy.ParseEnvoy([]byte(config))
	if err != nil {
		t.Fatal(err)
	}
	var ps []policy.Policy
	for _, r := range rules {
		ps = append(ps, r.Policy(false))
	}
	return ps
}

const webConfig = `
domain: web
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
`

func request(user string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*commonv3.RateLimitDescriptor{
		{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "user", Value: user}}}}}
}

func decided(allowed bool, remaining int64) func([]cluster.Hit) (cluster.CheckResult, error) {
	return func(hits []cluster.Hit) (cluster.CheckResult, error) {
		outcome := window.Allowed
		if !allowed {
			outcome = window.Refused
		}
		part := window.Result{Outcome: outcome, Limit: 2, WindowMs: 60_000, Remaining: remaining, ResetAt: 60_000, RetryAfterMs: 30_000}
		res := cluster.CheckResult{Allowed: allowed, Now: 30_000}
		for _, h := range hits {
			res.Hits = append(res.Hits, cluster.HitResult{Policy: h.Policy, Client: h.Client, Cost: h.Cost, Outcome: outcome, Parts: []window.Result{part}})
		}
		return res, nil
	}
}

// A descriptor that matches a policy becomes one hit on it, keyed by the
// descriptor's value; the limiter's decision becomes Envoy's answer.
func TestShouldRateLimitAsksTheLimiter(t *testing.T) {
	f := &fakeLimiter{policies: envoyPolicies(t, webConfig), decide: decided(true, 1)}
	s := New(Config{Limiter: f})
	resp, err := s.ShouldRateLimit(context.Background(), request("alice"))
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("allowed: %v %v", resp, err)
	}
	if len(f.asked) != 1 || len(f.asked[0]) != 1 || f.asked[0][0].Cost != 1 {
		t.Fatalf("limiter asked %v, want one hit", f.asked)
	}
	if st := resp.GetStatuses()[0]; st.GetLimitRemaining() != 1 || st.GetCurrentLimit().GetRequestsPerUnit() != 2 {
		t.Fatalf("status %v", st)
	}

	f.decide = decided(false, 0)
	resp, err = s.ShouldRateLimit(context.Background(), request("alice"))
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("refused: %v %v", resp, err)
	}
}

// A hit the cluster could not decide is UNAVAILABLE to Envoy (which then
// applies its failure mode), and says whether it may have counted.
func TestShouldRateLimitUnavailable(t *testing.T) {
	for _, c := range []struct {
		err     error
		unknown bool
	}{
		{&cluster.HitError{Outcome: cluster.ErrNotCounted, Reason: cluster.ErrNoLeader}, false},
		{&cluster.HitError{Outcome: cluster.ErrOutcomeUnknown, Cause: errors.New("leadership lost")}, true},
	} {
		f := &fakeLimiter{policies: envoyPolicies(t, webConfig), decide: func([]cluster.Hit) (cluster.CheckResult, error) { return cluster.CheckResult{}, c.err }}
		_, err := New(Config{Limiter: f}).ShouldRateLimit(context.Background(), request("bob"))
		st, _ := status.FromError(err)
		if st.Code() != codes.Unavailable {
			t.Fatalf("%v: %v, want UNAVAILABLE", c.err, err)
		}
		if got := strings.HasPrefix(st.Message(), "outcome unknown"); got != c.unknown {
			t.Errorf("%v: message %q; says unknown: %v, want %v", c.err, st.Message(), got, c.unknown)
		}
	}
}

func (f *fakeLimiter) AcquirePermit(context.Context, cluster.PermitRequest) (cluster.Permit, error) {
	return cluster.Permit{}, errors.New("not in this test")
}
func (f *fakeLimiter) ReleasePermit(context.Context, string, string) (cluster.Permit, error) {
	return cluster.Permit{}, errors.New("not in this test")
}
func (f *fakeLimiter) ReleaseOldestPermit(context.Context, string, string) (cluster.Permit, error) {
	return cluster.Permit{}, errors.New("not in this test")
}
