package cluster

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/topkeys"
	"github.com/rlnode/rlnode/window"
)

// localCallsRoute is the leader's own route: the request's check, then
// the committer, as opCalls runs on the leader.
type localCallsRoute struct{ c *Calls }

func (r localCallsRoute) calls(_ context.Context, req CallsRequest) (CallsAnswer, error) {
	if err := req.check(); err != nil {
		return CallsAnswer{}, err
	}
	return r.c.commit.submit(req)
}

// TestCallsWithoutACluster: per-call items are decided on a real state
// machine through the committer, each on its own; concurrent requests
// share entries; decided items reach the top keys; bad input writes
// nothing.
func TestCallsWithoutACluster(t *testing.T) {
	bench := &budgetBench{f: fsm.New(fsm.Config{OnFatal: func(err error) { t.Errorf("fsm halted: %v", err) }}), now: 1_700_000_000_000}
	top := &topSeen{}
	c := &Calls{commit: &callCommitter{log: bench, id: "n1"}, top: top}
	c.route = localCallsRoute{c}
	call := func(key string, hits int64) CallItem {
		return CallItem{Name: "api", Key: key, Call: window.Call{Alg: window.CallTokenBucket, Hits: hits, Limit: 5, Duration: 60_000}}
	}
	ctx := context.Background()
	ans, err := c.Decide(ctx, CallsRequest{Owner: "app", Items: []CallItem{call("a", 3), call("a", 3), call("b", 5)}})
	if err != nil || ans.ServedBy != "n1" || len(ans.Items) != 3 {
		t.Fatalf("answer %+v %v", ans, err)
	}
	for i, w := range []struct {
		over      bool
		remaining int64
	}{{false, 2}, {true, 2}, {false, 0}} {
		if it := ans.Items[i]; it.Over != w.over || it.Remaining != w.remaining || it.Reset != ans.Now+60_000 {
			t.Fatalf("item %d: %+v", i, it)
		}
	}
	before := bench.index
	if _, err := c.Decide(ctx, CallsRequest{Items: []CallItem{call("", 1)}}); !errors.Is(err, ErrBadRequest) || !errors.Is(err, ErrNotCounted) {
		t.Fatalf("an item without a key: %v, want a bad request not counted", err)
	}
	if bench.index != before {
		t.Fatalf("a bad request wrote %d entries", bench.index-before)
	}
	// Concurrent single-item callers: every one answered, from at most
	// one entry each, and together they take exactly key c's 5 units.
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := c.Decide(ctx, CallsRequest{Owner: "app", Items: []CallItem{call("c", 1)}})
			if err != nil || len(a.Items) != 1 {
				t.Errorf("concurrent call: %+v %v", a, err)
				return
			}
			if !a.Items[0].Over {
				mu.Lock()
				allowed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if allowed != 5 || bench.index-before > 8 {
		t.Fatalf("%d of 8 allowed in %d entries, want 5 in at most 8", allowed, bench.index-before)
	}
	if top.refused["api/a"] != 1 || top.allowed["api/b"] != 1 || top.allowed["api/c"] != 5 || top.refused["api/c"] != 3 {
		t.Fatalf("top keys saw allowed %v refused %v", top.allowed, top.refused)
	}
}

// topSeen counts what reaches the top keys.
type topSeen struct {
	mu               sync.Mutex
	allowed, refused map[string]int
}

func (s *topSeen) Record(name, key string, o topkeys.Outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.allowed == nil {
		s.allowed, s.refused = map[string]int{}, map[string]int{}
	}
	if o == topkeys.Refused {
		s.refused[name+"/"+key]++
	} else {
		s.allowed[name+"/"+key]++
	}
}

// grantFlags records how the committer stamps each entry: as a grant
// (refused while cluster time catches up, counted in flight) or not.
type grantFlags struct {
	*budgetBench
	mu     sync.Mutex
	grants []bool
}

func (g *grantFlags) applyLease(grant bool, encode func(now int64) []byte) (any, error) {
	g.mu.Lock()
	g.grants = append(g.grants, grant)
	g.mu.Unlock()
	return g.budgetBench.applyLease(grant, encode)
}

type continues bool

func (c continues) votersContinueTime() bool { return bool(c) }

// TestCallsGrantEntriesStampedAsGrants: an entry carrying a GLOBAL key's
// grant is stamped as a grant, callers' items are not (they go in entries
// of their own), and the leader says how long the grant is usable: its
// validity less the margin, and less --max-clock-offset before the
// window's end while some voter may move cluster time at a failover.
func TestCallsGrantEntriesStampedAsGrants(t *testing.T) {
	bench := &budgetBench{f: fsm.New(fsm.Config{OnFatal: func(err error) { t.Errorf("fsm halted: %v", err) }}), now: 1_700_000_000_000}
	log := &grantFlags{budgetBench: bench}
	for _, tc := range []struct {
		continues  bool
		key        string
		durationMs int64
		usableMs   int64
	}{
		{true, "long", 60_000, 2000 - 8},
		{false, "long2", 60_000, 2000 - 8},
		{true, "short", 1000, 994},   // 1001 ms less 6.5 ms
		{false, "short2", 1000, 494}, // and less 500 ms
	} {
		c := &callCommitter{log: log, id: "n1", clocks: continues(tc.continues), maxClockOffset: 500 * time.Millisecond}
		call := CallItem{Name: "api", Key: tc.key, Call: window.Call{Alg: window.CallTokenBucket, Hits: 1, Limit: 100, Duration: tc.durationMs}}
		grant := call
		grant.Call.Hits = 0
		grant.Lease = fsm.CallLease{Grant: true, Holder: "n2", Want: 10, LeaseMs: 2000}
		log.grants = nil
		if _, err := c.submit(CallsRequest{Owner: "app", Items: []CallItem{call}}); err != nil {
			t.Fatal(err)
		}
		ans, err := c.submit(CallsRequest{Items: []CallItem{grant}})
		if err != nil {
			t.Fatal(err)
		}
		if o := ans.Items[0]; o.Units != 10 || o.UsableMs != tc.usableMs {
			t.Fatalf("%s (voters continue time: %v): %+v, want 10 units usable %d ms", tc.key, tc.continues, o, tc.usableMs)
		}
		if len(log.grants) != 2 || log.grants[0] || !log.grants[1] {
			t.Fatalf("entries stamped as grants: %v, want [false true]", log.grants)
		}
	}
}
