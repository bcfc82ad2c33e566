package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/internal/wire"
)

// leaseDesk is a stand-in for the cluster's lease endpoints in unit tests
// of Local's own rules (its clock, its slots), where a test must move the
// holder's clock by hand. Process tests use real nodes.
type leaseDesk struct {
	mu       sync.Mutex
	budget   int64 // units left to grant
	validMs  int64
	granted  int64
	returned int64
	checks   int
	next     uint64
}

func (d *leaseDesk) start(t testing.TB) *Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		defer d.mu.Unlock()
		var in wireLease
		switch {
		case r.URL.Path == wire.LeasesPath:
			json.NewDecoder(r.Body).Decode(&in)
			units := min(in.Want, d.budget)
			d.budget -= units
			d.granted += units
			d.next++
			out := wireLease{Policy: in.Policy, Client: in.Client, Holder: in.Holder, Grant: d.next, Units: units,
				Limit: 1000, WindowMs: 60000, ValidForMs: d.validMs}
			if units < in.Want {
				out.RetryAfterMs = 5000
			}
			json.NewEncoder(w).Encode(out)
		case r.URL.Path == wire.LeaseReturnPath:
			json.NewDecoder(r.Body).Decode(&in)
			d.returned += in.Units
			d.budget += in.Units
			w.WriteHeader(http.StatusNoContent)
		case strings.HasPrefix(r.URL.Path, wire.CheckPath):
			d.checks++
			json.NewEncoder(w).Encode(wire.CheckBody{Allowed: true, Limit: 1000, Remaining: 1, WindowMs: 60000})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	c, err := New(Config{Addrs: []string{srv.Listener.Addr().String()}, RefreshInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (d *leaseDesk) counts() (granted, returned int64, checks int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.granted, d.returned, d.checks
}

// fakeClock is a hand-moved clock that keeps a monotonic reading.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// A key turns hot after HotAfter remote checks, is then decided from its
// grant, and a holder whose clock jumped past the deadline (a paused
// process) spends nothing more from that grant.
func TestLocalSpendsOnlyBeforeTheDeadline(t *testing.T) {
	d := &leaseDesk{budget: 10, validMs: 1000}
	c := d.start(t)
	l, err := NewLocal(c, LocalConfig{HotAfter: 2, MaxWant: 10, CoolAfter: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: time.Now()}
	l.now = clk.now
	ctx := context.Background()

	for i := 0; i < 1; i++ {
		r, err := l.Allow(ctx, "api", "k")
		if err != nil || !r.Allowed || strings.HasPrefix(r.ServedBy, "local:") {
			t.Fatalf("cold hit %d: %+v %v, want a remote decision", i, r, err)
		}
	}
	// The second hit makes the key hot: a grant of 10 is fetched.
	for i := 0; i < 10; i++ {
		r, err := l.Allow(ctx, "api", "k")
		if err != nil || !r.Allowed || r.ServedBy != "local:"+l.Holder() {
			t.Fatalf("hot hit %d: %+v %v, want a local allow", i, r, err)
		}
	}
	if g, _, checks := d.counts(); g != 10 || checks != 1 {
		t.Fatalf("granted %d, checks %d: want 10 and 1", g, checks)
	}
	r, err := l.Allow(ctx, "api", "k")
	if err != nil || r.Allowed || r.RetryAfter <= 0 {
		t.Fatalf("hit past the budget: %+v %v, want a refusal with a retry", r, err)
	}

	// Another key gets a fresh grant of 5, then the process "sleeps"
	// until just past its deadline less the margin: the units it still
	// holds are stale and nothing more may be spent.
	d.mu.Lock()
	d.budget = 5
	d.mu.Unlock()
	for i := 0; i < 2; i++ {
		if r, err := l.Allow(ctx, "api", "p"); err != nil || !r.Allowed {
			t.Fatalf("hit %d on p: %+v %v", i, r, err)
		}
	}
	clk.add(time.Second - time.Millisecond)
	if r, _ := l.Allow(ctx, "api", "p"); !r.Allowed || r.ServedBy != "local:"+l.Holder() {
		t.Fatalf("just before the deadline: %+v, want a local allow", r)
	}
	clk.add(2 * time.Millisecond)
	before, _, _ := d.counts()
	r, err = l.Allow(ctx, "api", "p")
	after, _, _ := d.counts()
	if err != nil || r.Allowed {
		t.Fatalf("past the deadline, budget spent: %+v %v, want refused (the held 3 units are stale)", r, err)
	}
	if after != before {
		t.Fatalf("granted %d more, want none (budget is 0)", after-before)
	}
}

// Close gives back every unit not spent.
func TestLocalCloseReturnsUnusedUnits(t *testing.T) {
	d := &leaseDesk{budget: 100, validMs: 5000}
	c := d.start(t)
	l, err := NewLocal(c, LocalConfig{HotAfter: 1, MaxWant: 40, CoolAfter: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if r, err := l.Allow(context.Background(), "api", "k"); err != nil || !r.Allowed {
			t.Fatalf("hit %d: %+v %v", i, r, err)
		}
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	granted, returned, _ := d.counts()
	if granted-returned != 3 {
		t.Fatalf("granted %d, returned %d: want exactly the 3 spent kept", granted, returned)
	}
}

// A key that cools down gives its units back by itself.
func TestLocalCoolKeyReturnsUnits(t *testing.T) {
	d := &leaseDesk{budget: 100, validMs: 60000}
	c := d.start(t)
	l, err := NewLocal(c, LocalConfig{HotAfter: 1, MaxWant: 40, CoolAfter: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	if r, err := l.Allow(context.Background(), "api", "k"); err != nil || !r.Allowed {
		t.Fatalf("hit: %+v %v", r, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		granted, returned, _ := d.counts()
		if granted-returned == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("granted %d, returned %d after the key cooled: want all but the 1 spent back", granted, returned)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A decision on a held key allocates nothing.
func TestLocalHotDecisionDoesNotAllocate(t *testing.T) {
	d := &leaseDesk{budget: 1 << 40, validMs: 60000}
	c := d.start(t)
	l, err := NewLocal(c, LocalConfig{HotAfter: 1, MaxWant: 1 << 30, CoolAfter: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		l.Allow(ctx, "api", "k")
	}
	allocs := testing.AllocsPerRun(1000, func() {
		if r, err := l.Allow(ctx, "api", "k"); err != nil || !r.Allowed {
			t.Fatalf("%+v %v", r, err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per hot decision, want 0", allocs)
	}
}

func BenchmarkLocalHotKey(b *testing.B) {
	d := &leaseDesk{budget: 1 << 62, validMs: 600000}
	c := d.start(b)
	l, err := NewLocal(c, LocalConfig{HotAfter: 1, MaxWant: 1 << 40, CoolAfter: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close(context.Background())
	ctx := context.Background()
	l.Allow(ctx, "api", "k")
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if r, _ := l.Allow(ctx, "api", "k"); !r.Allowed {
				b.Fatal("refused")
			}
		}
	})
}

// A decision reads the clock once it holds the key's lock, not before: a
// caller that waited for the lock (another caller held it, or it was
// descheduled) must not spend a grant whose deadline passed meanwhile.
// (Failed before the fix: AllowN decided on the reading it took before
// taking the locks, and allowed from the expired grant.)
func TestLocalDecidesOnAFreshReading(t *testing.T) {
	d := &leaseDesk{budget: 10, validMs: 1000}
	c := d.start(t)
	l, err := NewLocal(c, LocalConfig{HotAfter: 2, MaxWant: 10, CoolAfter: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: time.Now()}
	l.now = clk.now
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if r, err := l.Allow(ctx, "api", "k"); err != nil || !r.Allowed {
			t.Fatalf("hit %d: %+v %v", i, r, err)
		}
	}
	if r, _ := l.Allow(ctx, "api", "k"); r.ServedBy != "local:"+l.Holder() {
		t.Fatalf("the key is not decided locally: %+v", r)
	}
	// Hold the key's lock while a caller arrives; the grant (usable for
	// 1 s) runs out while it waits.
	l.mu.RLock()
	e := l.keys[localKey{"api", "k"}]
	l.mu.RUnlock()
	for { // no prefetch in flight: the caller below is the one to read the clock
		e.mu.Lock()
		idle := e.fetch == nil
		e.mu.Unlock()
		if idle {
			break
		}
		time.Sleep(time.Millisecond)
	}
	read := make(chan struct{})
	var once sync.Once
	l.now = func() time.Time {
		once.Do(func() { close(read) })
		return clk.now()
	}
	e.mu.Lock()
	done := make(chan Result)
	go func() {
		r, _ := l.Allow(ctx, "api", "k")
		done <- r
	}()
	select {
	case <-read: // the caller read the clock before the lock
	case <-time.After(200 * time.Millisecond): // or it waits for the lock first
	}
	clk.add(2 * time.Second)
	e.mu.Unlock()
	if r := <-done; r.Allowed && r.ServedBy == "local:"+l.Holder() {
		t.Fatalf("allowed from a grant whose deadline passed before the decision: %+v", r)
	}
}
