package region

import (
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/lease"
)

func TestConfigRefusesWhatCannotWork(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Name: "", Parent: []string{"p:1"}}, "name"},
		{Config{Name: "eu west", Parent: []string{"p:1"}}, "may only contain"},
		{Config{Name: strings.Repeat("a", 65), Parent: []string{"p:1"}}, "name"},
		{Config{Name: "eu"}, "--parent"},
		{Config{Name: "eu", Parent: []string{"p:1"}, Lease: time.Hour}, "lease"},
		{Config{Name: "eu", Parent: []string{"p:1"}, Lease: time.Millisecond}, "lease"},
	} {
		err := tc.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %q", tc.cfg, err, tc.want)
		}
	}
	ok := Config{Name: "eu-west.1", Parent: []string{"p:1"}}
	if err := ok.Validate(); err != nil || ok.Lease != 5*time.Second || ok.Tick == 0 || ok.MirrorEvery == 0 {
		t.Fatalf("defaults: %+v %v", ok, err)
	}
	if HolderID("eu") != "region:eu" {
		t.Fatal(HolderID("eu"))
	}
}

// TestDeltaOfARestartedTotal: a running total that went down was started
// again (the state machine dropped the key's slice state): all of it is
// new demand.
func TestDeltaOfARestartedTotal(t *testing.T) {
	if delta(10, 4) != 6 || delta(3, 10) != 3 || delta(0, 0) != 0 {
		t.Fatal("delta")
	}
}

// TestSuspendIsNoticedOnTheWallClock: between two ticks the wall clock
// ran 2 s while the monotonic one ran 20 ms: the machine slept.
func TestSuspendIsNoticedOnTheWallClock(t *testing.T) {
	h := &Holder{}
	base := lease.Stamp{Mono: 1e9, Wall: 1e18}
	if h.suspended(base) {
		t.Fatal("first tick taken for a suspend")
	}
	next := lease.Stamp{Mono: base.Mono + int64(20*time.Millisecond), Wall: base.Wall + int64(20*time.Millisecond)}
	if h.suspended(next) {
		t.Fatal("an ordinary tick taken for a suspend")
	}
	slept := lease.Stamp{Mono: next.Mono + int64(20*time.Millisecond), Wall: next.Wall + int64(2*time.Second)}
	if !h.suspended(slept) {
		t.Fatal("a 2 s sleep went unnoticed")
	}
}
