package cluster

import (
	"errors"
	"testing"
	"time"
)

// A staged server is promoted once its log reaches its target, chased
// once more when the cluster ran far ahead meanwhile, and given up on only
// after the join timeout; an unreachable one waits until then.
func TestPromoterSteps(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	s := staged{since: t0, target: 100}
	timeout := time.Minute
	unreachable := errors.New("connection refused")
	for _, c := range []struct {
		name    string
		applied uint64
		err     error
		commit  uint64
		at      time.Duration
		want    promoteStep
	}{
		{"behind its target", 99, nil, 120, time.Second, keepWaiting},
		{"at its target", 100, nil, 120, time.Second, promote},
		{"at its target, commit within the lag", 100, nil, 100 + maxPromoteLag, time.Second, promote},
		{"at its target, cluster ran ahead", 100, nil, 101 + maxPromoteLag, time.Second, chase},
		{"unreachable", 0, unreachable, 120, time.Second, keepWaiting},
		{"unreachable past the timeout", 0, unreachable, 120, timeout + time.Second, giveUp},
		{"behind past the timeout", 50, nil, 120, timeout + time.Second, giveUp},
		{"caught up just past the timeout", 100, nil, 120, timeout + time.Second, promote},
	} {
		if got := s.next(c.applied, c.err, c.commit, t0.Add(c.at), timeout); got != c.want {
			t.Errorf("%s: step %d, want %d", c.name, got, c.want)
		}
	}
}

// Staging is idempotent (a joining server asks again every few seconds:
// its clock and target stay those of its first request) until done.
func TestPromoterStagingIsIdempotent(t *testing.T) {
	var p promoter
	p.stage("n4", 10)
	first := p.snapshot()["n4"]
	p.stage("n4", 99)
	if got := p.snapshot()["n4"]; got != first {
		t.Fatalf("restaging changed %+v to %+v", first, got)
	}
	p.retarget("n4", 50)
	if got := p.snapshot()["n4"].target; got != 50 {
		t.Fatalf("retarget: %d", got)
	}
	p.done("n4")
	if len(p.snapshot()) != 0 {
		t.Fatal("done left it staged")
	}
	p.stage("n5", 1)
	p.clear()
	if len(p.snapshot()) != 0 {
		t.Fatal("clear left it staged")
	}
}
