package rls

import (
	"context"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/policy"
)

// TestConcurrencyDescriptors: a concurrency policy set for an Envoy domain
// takes a permit per request, refuses past the limit, and an
// is_negative_hits descriptor (the stream's end) gives the oldest back; a
// request refused by another descriptor holds no permit.
func TestConcurrencyDescriptors(t *testing.T) {
	inflight := policy.Policy{Name: "inflight", Algorithm: policy.Concurrency, Limits: []policy.Limit{{Limit: 2}},
		Envoy: &policy.Envoy{Domain: "s", Descriptors: []policy.EnvoyEntry{{Key: "user"}}}}
	perDay := policy.Fixed("daily", 3, 24*time.Hour)
	perDay.Envoy = &policy.Envoy{Domain: "s", Descriptors: []policy.EnvoyEntry{{Key: "tenant"}}, Unit: "DAY", RequestsPerUnit: 3}
	c := clustertest.Start(t, 1, clustertest.Options{Policies: []policy.Policy{inflight, perDay}})
	s := New(Config{Limiter: c.Leader(10 * time.Second).Node, PermitTTL: time.Minute})
	user := entries("user", "u1")
	done := &commonv3.RateLimitDescriptor{Entries: user.Entries, IsNegativeHits: true}
	for i, want := range []string{"OK OK", "OK OK", "OVER_LIMIT OVER_LIMIT"} {
		if got := verdict(t, s, user); got != want {
			t.Fatalf("request %d: %s, want %s", i+1, got, want)
		}
	}
	if got := verdict(t, s, done); got != "OK OK" {
		t.Fatalf("stream end: %s", got)
	}
	if got := verdict(t, s, user); got != "OK OK" {
		t.Fatalf("after a release: %s", got)
	}
	if n := len(c.Leader(time.Second).Budgets().LivePermits()); n != 2 {
		t.Fatalf("%d permits live, want 2", n)
	}
	// Refused by the daily limit: the permit taken for it goes back.
	verdict(t, s, done)
	tenant := entries("tenant", "t1")
	for range 3 {
		verdict(t, s, tenant)
	}
	resp, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "s", Descriptors: []*commonv3.RateLimitDescriptor{user, tenant}})
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("over the daily limit: %v %v", resp, err)
	}
	if n := len(c.Leader(time.Second).Budgets().LivePermits()); n != 1 {
		t.Fatalf("%d permits live after a refused request, want 1", n)
	}
}
