package main

import (
	"context"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/bench"
)

// TestShouldRateLimitLatency measures ShouldRateLimit on three rlnode
// processes at 64 concurrent calls over one HTTP/2 connection, as Envoy's
// rate limit filter makes them, through a follower and then the leader,
// each followed by GET /check at the same concurrency (rlnode bench's
// engine) for comparison. It runs only when asked:
//
//	RLNODE_BENCH_RLS=10s go test ./cmd/rlnode -run TestShouldRateLimitLatency -v
func TestShouldRateLimitLatency(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("RLNODE_BENCH_RLS"))
	if err != nil {
		t.Skip("set RLNODE_BENCH_RLS to a duration (e.g. 10s) to measure ShouldRateLimit latency")
	}
	rig := rlsConnect(t)
	for _, role := range []string{"follower", "leader"} {
		c := rig.clients[role]
		measureRLS(t, c, 64, time.Second) // warm-up: connections, first windows
		p50, p99, rate, errs := measureRLS(t, c, 64, d)
		t.Logf("ShouldRateLimit via the %s, 64 concurrent calls, %s: p50 %s, p99 %s, %.0f calls/s, %d errors", role, d, p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond), rate, errs)
		res, err := bench.Run(context.Background(), bench.Config{Addrs: []string{rig.urls[role]}, Concurrency: 64, Duration: d, Warmup: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("GET /check via the %s, 64 workers, %s: p50 %s, p99 %s, %.0f requests/s, %d errors", role, d, res.Latency.P50.Round(10*time.Microsecond), res.Latency.P99.Round(10*time.Microsecond), res.Throughput, res.Errors)
	}
}

func measureRLS(t *testing.T, c rlsv3.RateLimitServiceClient, streams int, d time.Duration) (p50, p99 time.Duration, rate float64, errs int) {
	t.Helper()
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	for w := range streams {
		wg.Go(func() {
			var mine []time.Duration
			bad := 0
			for i := 0; time.Now().Before(stop); i++ {
				req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{
					desc("remote_address", "10.1."+strconv.Itoa(w)+"."+strconv.Itoa(i%250)),
				}}
				start := time.Now()
				_, err := c.ShouldRateLimit(authed(), req)
				if err != nil {
					bad++
					continue
				}
				mine = append(mine, time.Since(start))
			}
			mu.Lock()
			lat = append(lat, mine...)
			errs += bad
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(lat) == 0 {
		t.Fatalf("no successful call (%d errors)", errs)
	}
	slices.Sort(lat)
	q := func(f float64) time.Duration { return lat[min(len(lat)-1, int(f*float64(len(lat))))] }
	return q(0.50), q(0.99), float64(len(lat)) / d.Seconds(), errs
}
