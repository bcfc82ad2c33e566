package client_test

import (
	"context"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/client"
	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/httpapi/apitest"
	"github.com/rlnode/rlnode/policy"
)

// benchRound is one timed run of workers calling decide.
type benchRound struct {
	perSec float64
	p99    time.Duration
}

func runRound(workers int, d time.Duration, decide func() bool) benchRound {
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(d)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, 1<<16)
			for time.Now().Before(end) {
				t0 := time.Now()
				decide()
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.Sort(lat)
	return benchRound{perSec: float64(len(lat)) / time.Since(start).Seconds(), p99: lat[len(lat)*99/100]}
}

func median[T int64 | float64 | time.Duration](v []T) T {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// Decisions per second and p99 latency of client.Local on a hot key
// against a remote check of a strict policy, interleaved in one run
// (medians of 5 rounds), and under-admission per window with 4
// application instances sharing one key. Run with
//
//	RLNODE_BENCH_LEASES=1 go test ./client -run TestBenchLocalVsRemote -v
func TestBenchLocalVsRemote(t *testing.T) {
	if os.Getenv("RLNODE_BENCH_LEASES") == "" {
		t.Skip("set RLNODE_BENCH_LEASES=1 to run")
	}
	const huge = 1 << 40
	cl := apitest.Start(t, 3, clustertest.Options{Policies: []policy.Policy{
		policy.Fixed("strict", huge, time.Hour), leased("leased", huge, time.Hour), leased("shared", 1000, time.Second)}})
	leader := cl.Leader(10 * time.Second)
	cl.WaitConverged(10 * time.Second)
	c := newClient(t, client.Config{Addrs: []string{leader.HTTPAddr}})
	l, err := client.NewLocal(c, client.LocalConfig{HotAfter: 1, MaxWant: 1 << 20, Lease: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	ctx := context.Background()
	remote := func() bool { r, err := c.Check(ctx, "strict", "k", 1); return err == nil && r.Allowed }
	local := func() bool { r, err := l.Allow(ctx, "leased", "k"); return err == nil && r.Allowed }
	local()

	var rRate, lRate []float64
	var rP99, lP99 []time.Duration
	for round := 0; round < 5; round++ {
		r := runRound(8, 2*time.Second, remote)
		lo := runRound(8, 2*time.Second, local)
		rRate, rP99 = append(rRate, r.perSec), append(rP99, r.p99)
		lRate, lP99 = append(lRate, lo.perSec), append(lP99, lo.p99)
	}
	t.Logf("remote Check (strict policy): %.0f decisions/s, p99 %s (medians of 5)", median(rRate), median(rP99))
	t.Logf("client.Local hot key:         %.0f decisions/s, p99 %s (medians of 5)", median(lRate), median(lP99))

	// Under-admission: four instances, each asking about twice its
	// quarter of 1000 per second, for 10 windows.
	var mu sync.Mutex
	perWindow := map[time.Time]int64{}
	var wg sync.WaitGroup
	stop := time.Now().Add(10 * time.Second)
	for i := 0; i < 4; i++ {
		li, err := client.NewLocal(c, client.LocalConfig{HotAfter: 2, Lease: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer li.Close(context.Background())
			for time.Now().Before(stop) {
				if r, err := li.Allow(ctx, "shared", "k"); err == nil && r.Allowed {
					mu.Lock()
					perWindow[r.ResetAt]++
					mu.Unlock()
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	var counts []int64
	for _, n := range perWindow {
		counts = append(counts, n)
	}
	slices.Sort(counts)
	// The first and last windows are partly outside the run.
	if len(counts) > 2 {
		counts = counts[1 : len(counts)-1]
	}
	t.Logf("4 instances, limit 1000/s, demand ~2000/s: admitted per window min %d, median %d, max %d (%d windows)",
		counts[0], median(counts), counts[len(counts)-1], len(counts))
	for _, n := range counts {
		if n > 1000 {
			t.Fatalf("a window admitted %d > 1000", n)
		}
	}

	// Below the limit (each instance at most 200/s, 800/s together), every
	// refusal is under-admission.
	var allowed, refused int64
	stop = time.Now().Add(10 * time.Second)
	for i := 0; i < 4; i++ {
		li, err := client.NewLocal(c, client.LocalConfig{HotAfter: 2, Lease: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer li.Close(context.Background())
			for time.Now().Before(stop) {
				r, err := li.Allow(ctx, "shared", "below")
				mu.Lock()
				if err == nil && r.Allowed {
					allowed++
				} else {
					refused++
				}
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	t.Logf("4 instances below the limit: %d allowed, %d refused (%.2f%% under-admission)", allowed, refused,
		100*float64(refused)/float64(allowed+refused))
}
