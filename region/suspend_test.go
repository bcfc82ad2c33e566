package region

import (
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/lease"
	"github.com/rlnode/rlnode/policy"
)

// TestSuspendWithdrawsOnceTheClockStampsAgain: a one-node region whose
// machine slept (the wall clock ran 2 s ahead of the monotonic one
// between two ticks) withdraws every slice; right after the wake-up the
// leader clock refuses to stamp (its wall clock stepped against the
// monotonic one, here by the testing offset), so the first withdrawal
// fails, and the holder asks nothing and tries again on every tick
// until the clock check has judged the clock again and the withdrawal
// is written. A real node: its slices, its leader clock, its clock
// check.
func TestSuspendWithdrawsOnceTheClockStampsAgain(t *testing.T) {
	g := policy.Policy{Name: "g", Algorithm: "fixed_window", Limits: []policy.Limit{{Limit: 400, Window: policy.Duration(10 * time.Second)}},
		Consistency: policy.Leased, Scope: policy.Global, Mirrored: true}
	c := clustertest.Start(t, 1, clustertest.Options{Policies: []policy.Policy{g}})
	n := c.Leader(10 * time.Second)
	sl := n.Slices()
	held := func() int64 {
		total := int64(0)
		for _, st := range sl.SliceStats() {
			total += st.Held
		}
		return total
	}
	now := time.Now()
	item := fsm.SliceItem{Kind: fsm.SliceGrant, Policy: "g", Client: "c", Grant: 7, Units: 10,
		ResetAt: now.Add(9 * time.Second).UnixMilli(), WindowStart: now.Add(-time.Second).UnixMilli(), WindowMs: 10_000}
	if out, err := sl.WriteSlices([]cluster.SliceWrite{{Item: item, Deadline: now.Add(20 * time.Second)}}); err != nil || out[0] != 0 || held() != 10 {
		t.Fatalf("setup: slice written %v %v, held %d", out, err, held())
	}
	h, err := New(Config{Name: "eu", Parent: []string{"127.0.0.1:1"}}, n.Node, sl)
	if err != nil {
		t.Fatal(err)
	}
	wake := h.clock.Now()
	h.lastTick = lease.Stamp{Mono: wake.Mono - int64(20*time.Millisecond), Wall: wake.Wall - int64(2*time.Second)}
	n.SetClockOffset(2 * time.Second)
	h.tick()
	if held() != 10 {
		t.Fatalf("the first withdrawal was written (held %d) while the leader clock had just stepped: the test shows nothing", held())
	}
	start := time.Now()
	clustertest.Poll(t, 15*time.Second, func() error {
		h.tick()
		if u := held(); u != 0 {
			return errUnits(u)
		}
		return nil
	})
	t.Logf("withdrawn %s after the wake-up, once the leader clock stamped again", time.Since(start).Round(time.Millisecond))
}

type errUnits int64

func (e errUnits) Error() string { return "slices still hold units after the wake-up" }
