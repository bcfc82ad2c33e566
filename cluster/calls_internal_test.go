package cluster

import (
	"context"
	"errors"
	"sync"
	"testing"

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
