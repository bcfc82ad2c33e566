package rls

import (
	"context"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/metrics"
	"github.com/rlnode/rlnode/policy"
)

// results records what the server reported (the metrics package's role).
type results struct {
	mu     sync.Mutex
	counts map[string]int
	limits map[string]metrics.RLSLimitStats
}

func (r *results) RLSDescriptor(domain, result string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts[domain+"/"+result]++
}

func (r *results) RLSLimit(domain, descriptor string, st metrics.RLSLimitStats) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.limits[domain+"/"+descriptor]
	s.TotalHits += st.TotalHits
	s.OverLimit += st.OverLimit
	s.NearLimit += st.NearLimit
	s.WithinLimit += st.WithinLimit
	s.ShadowMode += st.ShadowMode
	r.limits[domain+"/"+descriptor] = s
}

// serverOn starts a one-node in-process cluster seeded with config's
// policies (anchored: the test never waits for a window) and a server on
// it (cmd/rlnode's process tests go through a follower).
func serverOn(t *testing.T, config string, cfg Config) (*Server, *results) {
	t.Helper()
	_, ps, err := policy.LoadEnvoy([]policy.EnvoyFile{{Name: "c.yaml", Data: []byte(config)}}, policy.EnvoyOptions{Anchored: true})
	if err != nil {
		t.Fatal(err)
	}
	c := clustertest.Start(t, 1, clustertest.Options{Limit: 10, Window: time.Minute, Policies: ps})
	cfg.Limiter = c.Leader(10 * time.Second).Node
	rec := &results{counts: map[string]int{}, limits: map[string]metrics.RLSLimitStats{}}
	cfg.Observer = rec
	return New(cfg), rec
}

func entries(kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func verdict(t *testing.T, s *Server, ds ...*commonv3.RateLimitDescriptor) string {
	t.Helper()
	resp, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "s", Descriptors: ds})
	if err != nil {
		t.Fatal(err)
	}
	v := resp.GetOverallCode().String()
	for _, st := range resp.GetStatuses() {
		v += " " + st.GetCode().String()
	}
	return v
}

const modesConfig = `
domain: s
descriptors:
  - {key: a, rate_limit: {unit: day, requests_per_unit: 1}}
  - {key: q, quota_mode: true, rate_limit: {unit: day, requests_per_unit: 1}}
  - {key: q2, quota_mode: true, rate_limit: {unit: day, requests_per_unit: 1}}
`

func TestQuotaModeAndRefunds(t *testing.T) {
	s, rec := serverOn(t, modesConfig, Config{})
	for i, c := range []struct {
		ds   []*commonv3.RateLimitDescriptor
		want string
	}{
		{[]*commonv3.RateLimitDescriptor{entries("q", "x")}, "OK OK"},
		// the only quota descriptor is over: the request is
		{[]*commonv3.RateLimitDescriptor{entries("q", "x")}, "OVER_LIMIT OVER_LIMIT"},
		// one of two quota descriptors over: the request passes
		{[]*commonv3.RateLimitDescriptor{entries("q", "x"), entries("q2", "z")}, "OK OVER_LIMIT OK"},
		// quota descriptors stand apart from the all-or-nothing group
		{[]*commonv3.RateLimitDescriptor{entries("a", "1"), entries("q", "x"), entries("q2", "z")}, "OVER_LIMIT OK OVER_LIMIT OVER_LIMIT"},
	} {
		if got := verdict(t, s, c.ds...); got != c.want {
			t.Fatalf("request %d: %s, want %s", i, got, c.want)
		}
	}
	refund := entries("a", "2")
	refund.IsNegativeHits = true
	for i := 0; i < 3; i++ {
		if got := verdict(t, s, refund); got != "OK OK" {
			t.Fatalf("refund %d: %s", i, got)
		}
	}
	if got := verdict(t, s, entries("a", "2")); got != "OK OK" {
		t.Fatalf("after refunds: %s; want them to have changed nothing", got)
	}
	if st := rec.limits["s/q"]; st.TotalHits != 4 || st.OverLimit != 3 || st.WithinLimit != 1 || st.NearLimit != 1 {
		t.Fatalf("q's counters %+v", st)
	}
}

func TestGlobalShadowMode(t *testing.T) {
	s, rec := serverOn(t, modesConfig, Config{GlobalShadowMode: true})
	if got := verdict(t, s, entries("a", "1"), entries("q", "x")); got != "OK OK OK" {
		t.Fatalf("first: %s", got)
	}
	// Both over: statuses say so, the request still passes.
	if got := verdict(t, s, entries("a", "1"), entries("q", "x")); got != "OK OVER_LIMIT OVER_LIMIT" {
		t.Fatalf("second: %s", got)
	}
	if rec.counts["s/global_shadow_mode"] != 1 {
		t.Fatalf("results %v", rec.counts)
	}
}

// A descriptor's hits_addend 0 looks at its counter and counts nothing,
// as envoyproxy/ratelimit's increment by 0.
func TestHitsAddendZeroCountsNothing(t *testing.T) {
	s, _ := serverOn(t, modesConfig, Config{})
	look := func() (string, uint32) {
		t.Helper()
		d := entries("a", "c")
		d.HitsAddend = wrapperspb.UInt64(0)
		resp, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "s", Descriptors: []*commonv3.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatal(err)
		}
		st := resp.GetStatuses()[0]
		if st.GetCurrentLimit().GetRequestsPerUnit() != 1 || st.GetDurationUntilReset().AsDuration() <= 0 {
			t.Fatalf("check: %v", resp)
		}
		return resp.GetOverallCode().String(), st.GetLimitRemaining()
	}
	for i := 0; i < 3; i++ {
		if code, rem := look(); code != "OK" || rem != 1 {
			t.Fatalf("check %d before any hit: %s remaining %d", i, code, rem)
		}
	}
	if got := verdict(t, s, entries("a", "c")); got != "OK OK" {
		t.Fatalf("the hit after the checks: %s; want the budget untouched", got)
	}
	if code, rem := look(); code != "OK" || rem != 0 {
		t.Fatalf("check after the hit: %s remaining %d", code, rem)
	}
}
