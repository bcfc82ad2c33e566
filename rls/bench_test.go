package rls

import (
	"context"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/policy"
)

// benchDomain is a domain limiting descriptor key k far above what a
// benchmark spends.
func benchDomain(name string) []byte {
	return []byte("domain: " + name + "\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1000000000}\n")
}

// benchServers starts a cluster of n nodes with a leased domain "hot" and a
// strict one "strict" and returns a server on the leader and, with n > 1, one
// on a follower; calls go straight to ShouldRateLimit (no gRPC), so the
// profile is the decision path's.
func benchServers(b *testing.B, n int) (leader, follower *Server) {
	b.Helper()
	files := []policy.EnvoyFile{{Name: "hot.yaml", Data: benchDomain("hot")}, {Name: "strict.yaml", Data: benchDomain("strict")}}
	_, ps, err := policy.LoadEnvoy(files, policy.EnvoyOptions{LeasedDomains: []string{"hot"}})
	if err != nil {
		b.Fatal(err)
	}
	c := clustertest.Start(b, n, clustertest.Options{Policies: ps})
	l := c.Leader(10 * time.Second)
	leader = New(Config{Limiter: l.Node})
	if n > 1 {
		c.WaitConverged(10 * time.Second)
		follower = New(Config{Limiter: c.Followers(l)[0].Node})
	}
	return leader, follower
}

// benchRequests are the requests a benchmark cycles through: keys
// values of domain.
func benchRequests(domain string, keys int) []*rlsv3.RateLimitRequest {
	reqs := make([]*rlsv3.RateLimitRequest, keys)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*commonv3.RateLimitDescriptor{
			{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v" + strconv.Itoa(i)}}}}}
	}
	return reqs
}

// runShouldRateLimit runs reqs round robin from parallel calls in flight
// (GOMAXPROCS x parallelism). Besides ns/op it reports cpu-ns/op, the
// process's user+system CPU per request (the cluster's included), which a
// busy host moves far less than the wall clock.
func runShouldRateLimit(b *testing.B, s *Server, reqs []*rlsv3.RateLimitRequest, parallelism int) {
	b.Helper()
	// Warm up: leases are granted to keys this node has seen hot.
	deadline := time.Now().Add(2 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		if _, err := s.ShouldRateLimit(context.Background(), reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(parallelism)
	cpu0 := processCPU(b)
	b.ResetTimer()
	defer func() { b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op") }()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := s.ShouldRateLimit(context.Background(), reqs[int(next.Add(1))%len(reqs)])
			if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				b.Errorf("%v %v", resp.GetOverallCode(), err)
				return
			}
		}
	})
}

// processCPU is the process's user+system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkShouldRateLimit measures one request of one descriptor on a
// leased policy's 16 hot values (decided from leases; 2 calls in flight)
// and on a strict policy (through the log; 64 in flight, as Envoy's
// filter keeps them), on a one-node cluster's leader:
//
//	go test ./rls -run '^$' -bench ShouldRateLimit -cpuprofile /tmp/rls.cpu
func BenchmarkShouldRateLimit(b *testing.B) {
	leader, _ := benchServers(b, 1)
	b.Run("leader/leased-hot", func(b *testing.B) { runShouldRateLimit(b, leader, benchRequests("hot", 16), 1) })
	b.Run("leader/strict", func(b *testing.B) { runShouldRateLimit(b, leader, benchRequests("strict", 16), 32) })
}

// BenchmarkShouldRateLimitFollower is BenchmarkShouldRateLimit through a
// follower of a three-node cluster (strict hits hop to the leader).
func BenchmarkShouldRateLimitFollower(b *testing.B) {
	_, follower := benchServers(b, 3)
	b.Run("follower/leased-hot", func(b *testing.B) { runShouldRateLimit(b, follower, benchRequests("hot", 16), 1) })
	b.Run("follower/strict", func(b *testing.B) { runShouldRateLimit(b, follower, benchRequests("strict", 16), 32) })
}
