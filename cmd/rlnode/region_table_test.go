package main

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// TestGlobalAdmissionTable measures the admitted share of an ideal global
// limiter (which would admit min(limit, demand) per window) for a global
// 400 per window, two one-node regions, round trips and demand splits as
// listed; demand is twice the limit. It takes minutes: it runs only with
// RLNODE_REGION_TABLE=1 (docs/multi-region.md has its numbers).
func TestGlobalAdmissionTable(t *testing.T) {
	proctest.Long(t)
	if os.Getenv("RLNODE_REGION_TABLE") == "" {
		t.Skip("set RLNODE_REGION_TABLE=1 to measure the admission table (minutes)")
	}
	for _, tc := range []struct {
		name   string
		oneWay time.Duration
		window string
		ms     int64
		euPct  int
	}{
		{"100ms/10s/50-50", 50 * time.Millisecond, "10s", 10_000, 50},
		{"100ms/10s/90-10", 50 * time.Millisecond, "10s", 10_000, 90},
		{"300ms/10s/50-50", 150 * time.Millisecond, "10s", 10_000, 50},
		{"300ms/10s/90-10", 150 * time.Millisecond, "10s", 10_000, 90},
		{"300ms/60s/50-50", 150 * time.Millisecond, "60s", 60_000, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := startMultiRegion(t, tc.oneWay, map[string][]string{"eu": nil, "us": nil})
			m.globalPolicy(t, "g", globalLimit, tc.window)
			// Demand: twice the limit per window, split euPct/100-euPct,
			// each region's callers paced to their share.
			perSec := float64(2*globalLimit) / (float64(tc.ms) / 1000)
			var log hitLog
			var wg sync.WaitGroup
			ctx, stop := context.WithTimeout(context.Background(), time.Duration(tc.ms)*time.Millisecond*3+2*time.Second)
			defer func() { stop(); wg.Wait() }()
			start := time.Now()
			for name, pct := range map[string]int{"eu": tc.euPct, "us": 100 - tc.euPct} {
				rate := perSec * float64(pct) / 100
				workers := max(1, int(rate/20))
				pace := time.Duration(float64(time.Second) * float64(workers) / rate)
				hammer(ctx, &wg, &log, m.regions[name].URL(), name, "g", "tenant", workers, pace)
			}
			wg.Wait()
			hits := log.all()
			if bad := globalViolations(hits, globalLimit, tc.ms); len(bad) > 0 {
				t.Fatalf("global limit exceeded: %v", bad[:min(len(bad), 5)])
			}
			sent := map[string]int64{}
			for _, h := range hits {
				sent[h.region]++
			}
			for w, by := range windowAdmission(hits, tc.ms, start, time.Now()) {
				total := by["eu"] + by["us"]
				t.Logf("%s window ending %d: admitted %d of an ideal %d (%.0f%%): eu %d, us %d; median answer eu %s us %s",
					tc.name, w, total, globalLimit, 100*float64(total)/globalLimit, by["eu"], by["us"],
					medianLatency(hits, "eu"), medianLatency(hits, "us"))
			}
		})
	}
}
