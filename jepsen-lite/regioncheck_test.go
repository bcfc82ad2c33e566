package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/jepsen-lite/checker"
)

// hitAt is an allowed (or refused) hit of key k sent at sentMs and
// answered at recvMs (Unix ms), naming the window ending resetAt.
func hitAt(region string, sentMs, recvMs, resetAt int64, allowed bool) regionRecord {
	status := 200
	if !allowed {
		status = 429
	}
	return regionRecord{Region: region, Node: region + "1", Policy: "g", Key: "k0", Sent: sentMs * 1e6, Recv: recvMs * 1e6,
		Outcome: checker.OutcomeOK, Status: status, Allowed: allowed, ResetAt: resetAt}
}

// fill is n allowed hits from region, sent from `from` one ms apart,
// each answered 2 ms later, naming resetAt.
func fill(region string, n int, from, resetAt int64) []regionRecord {
	var out []regionRecord
	for i := range int64(n) {
		out = append(out, hitAt(region, from+i, from+i+2, resetAt, true))
	}
	return out
}

func checksOf(res globalResult) []string {
	var out []string
	for _, v := range res.Violations {
		out = append(out, v.Check)
	}
	return out
}

// TestCheckGlobal: handcrafted histories of two regions against 10 per
// 1000 ms. A correct one passes; each way of exceeding the limit across
// regions, a hit spent after its window, and a status outside 200/429/
// 503 are caught; an unknown outcome only raises "possible".
func TestCheckGlobal(t *testing.T) {
	const limit, window, slack = 10, 1000, 5
	cfg := globalConfig{Policy: "g", Limit: limit, WindowMs: window, SlackMs: slack}
	// Window 1: [1000, 2000); window 2: [2100, 3100) (anchored windows
	// leave a gap).
	valid := append(fill("a", 6, 1100, 2000), fill("b", 4, 1200, 2000)...)
	valid = append(valid, hitAt("a", 1500, 1502, 2000, false), hitAt("b", 1600, 1603, 2000, false))
	valid = append(valid, fill("a", 5, 2200, 3100)...)
	valid = append(valid, fill("b", 5, 2300, 3100)...)
	valid = append(valid, hitAt("a", 900, 1000, 0, false), hitAt("b", 3200, 3201, 0, false)) // demand before and after: both windows full
	cases := []struct {
		name string
		hits []regionRecord
		want []string
	}{
		{"valid", valid, nil},
		{"two regions each under, together over", append(append([]regionRecord(nil), valid...), hitAt("b", 1700, 1702, 2000, true)), []string{checkGlobalNamed, checkGlobalDecided}},
		// A's units of window 1 spent 50 ms into window 2, which b
		// filled: the hit names window 1 (named count fine), but it was
		// sent after window 1 ended, and window 2 decided 11.
		{"spent after its window, on top of the next", append(append([]regionRecord(nil), valid...), hitAt("a", 2150, 2152, 2000, true)), []string{checkGlobalDecided, checkGlobalAfter, checkGlobalNamed}},
		{"wrong status", append(append([]regionRecord(nil), valid...), regionRecord{Region: "a", Node: "a1", Policy: "g", Key: "k0", Sent: 1800e6, Recv: 1801e6, Outcome: checker.OutcomeUnknown, Status: 403}), []string{checkGlobalStatus}},
		{"nothing allowed", []regionRecord{hitAt("a", 1000, 1001, 2000, false)}, []string{checkGlobalNone}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := checkGlobal(tc.hits, cfg)
			got := checksOf(res)
			for _, w := range tc.want {
				if !strings.Contains(strings.Join(got, ","), w) {
					t.Errorf("want a %s violation, got %v", w, res.Violations)
				}
			}
			if len(tc.want) == 0 && len(got) > 0 {
				t.Errorf("want no violation, got %v", res.Violations)
			}
		})
	}

	// An unknown hit in flight during window 1 only raises "possible".
	res := checkGlobal(append(append([]regionRecord(nil), valid...), regionRecord{Region: "b", Node: "b2", Policy: "g", Key: "k0",
		Sent: 1900e6, Recv: 3000e6, Outcome: checker.OutcomeUnknown}), cfg)
	if len(res.Violations) > 0 || res.MaxPossible != limit+1 || res.PossibleOver != 2 {
		t.Fatalf("an unknown outcome: violations %v, max possible %d (want %d), windows possibly over %d (want 2)",
			res.Violations, res.MaxPossible, limit+1, res.PossibleOver)
	}
	// Admission: both windows full with demand over the limit and fully
	// admitted; shares by region.
	res = checkGlobal(valid, cfg)
	if res.Admission == nil || *res.Admission != 1 || res.RegionShare["a"] != 0.55 {
		t.Fatalf("admission %v, shares %v; want 100%% and a 55%%", pct(res.Admission), res.RegionShare)
	}
}

// TestCheckGlobalBucket: a token bucket of 10 per 1000 ms (a token
// every 100 ms), burst 3, shared by two regions: burst + refill passes,
// one more within the same span is caught, whichever region spent it.
func TestCheckGlobalBucket(t *testing.T) {
	cfg := globalConfig{Policy: "g", Limit: 10, WindowMs: 1000, Bucket: "tb", BucketLimit: 10, BucketWindowMs: 1000, BucketBurst: 3, SlackMs: 5}
	hit := func(region string, sentMs int64) regionRecord {
		r := hitAt(region, sentMs, sentMs+2, 0, true)
		r.Policy = "tb"
		return r
	}
	// The burst at once, then a token every 100 ms, from both regions.
	valid := []regionRecord{hit("a", 1000), hit("b", 1000), hit("a", 1001), hit("b", 1100), hit("a", 1200), hit("b", 1300), hitAt("a", 1000, 1001, 2000, true)}
	res := checkGlobal(valid, cfg)
	if len(res.Violations) > 0 || res.Bucket == nil || res.Bucket.Allowed != 6 {
		t.Fatalf("burst + refill: %v, %+v", res.Violations, res.Bucket)
	}
	res = checkGlobal(append(valid, hit("b", 1301)), cfg)
	if got := checksOf(res); len(got) != 1 || got[0] != checkGlobalBucket {
		t.Fatalf("one token too many: want a %s violation, got %v", checkGlobalBucket, res.Violations)
	}
}

// TestRegionFlags: the multi-cluster flags parse, and bad ones are
// refused with the flag named.
func TestRegionFlags(t *testing.T) {
	o, err := parseFlags([]string{"--regions"}, io.Discard)
	if err != nil || len(o.delays) != 2 || len(o.nemeses) != len(allRegionNemeses) || !slices.Equal(o.holders, []int{2, 1}) {
		t.Fatalf("defaults: %v, delays %v, nemeses %v, holders %v", err, o.delays, o.nemeses, o.holders)
	}
	o, err = parseFlags([]string{"--regions", "--nemesis", "region-cut,parent-kill", "--region-delays", "150ms,50ms", "--region-holders", "0,3"}, io.Discard)
	if err != nil || o.delays[0] != 150*time.Millisecond || len(o.nemeses) != 2 || !slices.Equal(o.holders, []int{0, 3}) {
		t.Fatalf("a list: %v, delays %v, nemeses %v, holders %v", err, o.delays, o.nemeses, o.holders)
	}
	for _, bad := range [][]string{
		{"--nemesis", "kill"}, // a single-cluster fault
		{"--region-delays", "50ms"},
		{"--region-delays", "fast,slow"},
		{"--demand-shape", "square"},
		{"--fault-region", "c"},
		{"--region-holders", "2"},
		{"--region-holders", "-1,1"},
		{"--region-holders", "a,b"},
		{"--split", "1"},
	} {
		if _, err := parseFlags(append([]string{"--regions"}, bad...), io.Discard); err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(bad[0], "--")) {
			t.Errorf("%v: want an error naming %s, got %v", bad, bad[0], err)
		}
	}
}
