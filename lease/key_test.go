package lease

import (
	"testing"
	"time"
)

// fakeClock is a hand-moved pair of clocks: each can be moved alone, as a
// suspend (wall only), a monotonic stall or a wall-clock step do.
type fakeClock struct{ now Stamp }

func (c *fakeClock) Now() Stamp               { return c.now }
func (c *fakeClock) both(d time.Duration)     { c.now = c.now.Add(d) }
func (c *fakeClock) wallOnly(d time.Duration) { c.now.Wall += int64(d) }
func (c *fakeClock) monoOnly(d time.Duration) { c.now.Mono += int64(d) }
func newFakeClock() *fakeClock                { return &fakeClock{now: Stamp{Mono: 1e9, Wall: 1_700_000_000e9}} }
func testKey(cfg Config, clk *fakeClock) *Key[string] {
	c := cfg
	return NewKey[string](&c, clk.Now())
}

// grant installs a grant of units usable for usable, sent now.
func grant(t *testing.T, k *Key[string], clk *fakeClock, units int64, usable time.Duration) {
	t.Helper()
	if _, ok := k.Want(clk.Now(), 0); !ok && !k.Fetching() {
		t.Fatal("the key did not ask for a grant")
	}
	if back := k.Installed(clk.Now(), clk.Now(), 1, units, usable, "g"); len(back) != 0 {
		t.Fatalf("a fresh grant was given back: %+v", back)
	}
}

// spendAll spends unit by unit and counts what was allowed.
func spendAll(k *Key[string], now Stamp) int64 {
	var n int64
	for {
		if _, ok := k.Spend(now, 1); !ok {
			return n
		}
		n++
	}
}

// A suspended machine: the monotonic clock stopped while the wall clock
// ran on past the deadline. The holder wakes with nothing to spend. (Fails
// with the wall-clock half of the deadline check removed.)
func TestSuspendedMachineWakesWithNothingToSpend(t *testing.T) {
	clk := newFakeClock()
	k := testKey(NodeConfig(), clk)
	grant(t, k, clk, 10, 2*time.Second)
	if _, ok := k.Spend(clk.Now(), 1); !ok {
		t.Fatal("a live grant refused to spend")
	}
	clk.wallOnly(5 * time.Second) // suspended for 5 s: the monotonic clock did not move
	if got := k.Available(clk.Now()); got != 0 {
		t.Fatalf("after a suspend past the deadline %d units are available, want 0", got)
	}
	if n := spendAll(k, clk.Now()); n != 0 {
		t.Fatalf("after a suspend past the deadline %d units were spent, want 0", n)
	}
}

// A paused process whose wall clock was stepped back meanwhile: only the
// monotonic clock says the deadline passed, and it is enough. (Fails with
// the monotonic half of the check removed.)
func TestMonotonicClockEndsAGrantTheWallClockStillAllows(t *testing.T) {
	clk := newFakeClock()
	k := testKey(NodeConfig(), clk)
	grant(t, k, clk, 10, 2*time.Second)
	clk.monoOnly(3 * time.Second) // paused 3 s while NTP stepped the wall clock back 3 s
	if n := spendAll(k, clk.Now()); n != 0 {
		t.Fatalf("past the monotonic deadline %d units were spent, want 0", n)
	}
}

// A monotonic stall short of the deadline and a wall clock that ran a
// little: units stay spendable until either clock reaches the deadline,
// never after, and never more than were granted.
func TestSpendsOnlyWhatWasGrantedBeforeTheDeadline(t *testing.T) {
	clk := newFakeClock()
	k := testKey(NodeConfig(), clk)
	grant(t, k, clk, 5, time.Second)
	clk.both(time.Second - time.Nanosecond)
	if n := spendAll(k, clk.Now()); n != 5 {
		t.Fatalf("just before the deadline %d units were spent, want all 5", n)
	}
	grant(t, k, clk, 5, time.Second)
	clk.both(time.Second)
	if n := spendAll(k, clk.Now()); n != 0 {
		t.Fatalf("at the deadline %d units were spent, want 0", n)
	}
	if back := k.TakeExpired(clk.Now(), nil); len(back) != 1 || back[0].Left != 5 {
		t.Fatalf("expired grants handed back: %+v, want the one with 5 left", back)
	}
}

// The grant ending first is spent first; a hit spends across grants only
// when their live units cover it.
func TestSpendsEarliestDeadlineFirst(t *testing.T) {
	clk := newFakeClock()
	k := testKey(NodeConfig(), clk)
	k.Want(clk.Now(), 0)
	k.Installed(clk.Now(), clk.Now(), 2, 3, 2*time.Second, "late")
	k.Want(clk.Now(), 0) // in flight already: no second ask
	k.fetching = true
	k.Installed(clk.Now(), clk.Now(), 1, 3, time.Second, "early")
	if g, ok := k.Spend(clk.Now(), 2); !ok || g.Info != "early" || g.Left != 1 {
		t.Fatalf("first spend from %+v, want the early grant with 1 left", g)
	}
	if g, ok := k.Spend(clk.Now(), 2); !ok || g.Info != "late" || g.Left != 2 {
		t.Fatalf("spend across grants ended on %+v, want the late one with 2 left", g)
	}
	if _, ok := k.Spend(clk.Now(), 3); ok {
		t.Fatal("spent 3 units out of 2")
	}
	clk.both(time.Second)
	if got := k.Available(clk.Now()); got != 2 {
		t.Fatalf("after the early deadline %d available, want the late grant's 2", got)
	}
}

// A grant already over when it arrives, or not usable at all, is handed
// back at once; past MaxGrants the grant that ends first gives way.
func TestInstalledHandsBackWhatNobodyWillSpend(t *testing.T) {
	clk := newFakeClock()
	cfg := NodeConfig()
	cfg.MaxGrants = 2
	k := testKey(cfg, clk)
	sent := clk.Now()
	clk.both(time.Second)
	k.fetching = true
	if back := k.Installed(clk.Now(), sent, 1, 4, time.Second, "late answer"); len(back) != 1 {
		t.Fatalf("a grant over on arrival was kept: back %+v", back)
	}
	if back := k.Installed(clk.Now(), clk.Now(), 2, 4, 0, "unusable"); len(back) != 1 {
		t.Fatalf("an unusable grant was kept: back %+v", back)
	}
	for i, usable := range []time.Duration{3 * time.Second, 2 * time.Second} {
		if back := k.Installed(clk.Now(), clk.Now(), uint64(3+i), 1, usable, "kept"); len(back) != 0 {
			t.Fatalf("grant %d: %+v handed back", i, back)
		}
	}
	back := k.Installed(clk.Now(), clk.Now(), 9, 1, 4*time.Second, "newest")
	if len(back) != 1 || back[0].ID != 4 {
		t.Fatalf("past MaxGrants handed back %+v, want grant 4 (ends first)", back)
	}
}

// Sizing and timing of requests: one at a time, sized from the rate and
// the horizon within the bounds, again when held units run low or the
// newest grant nears its end.
func TestWantSizesFromDemandAndAsksOnceAtATime(t *testing.T) {
	clk := newFakeClock()
	cfg := NodeConfig()
	k := testKey(cfg, clk)
	for range 100 { // 100 units over 250 ms: 400/s
		k.Demand(clk.Now(), 1)
	}
	clk.both(250 * time.Millisecond)
	k.Demand(clk.Now(), 1)
	want, ok := k.Want(clk.Now(), 1)
	if !ok || want != 400 {
		t.Fatalf("want %d %v, want 400 (400/s over a 1 s horizon)", want, ok)
	}
	if _, again := k.Want(clk.Now(), 1); again {
		t.Fatal("asked twice while a request was in flight")
	}
	k.Installed(clk.Now(), clk.Now(), 1, 400, 2*time.Second, "g")
	if _, ok := k.Want(clk.Now(), 1); ok {
		t.Fatal("asked again with a full fresh grant")
	}
	k.Spend(clk.Now(), 320) // 80 left: lasts 200 ms at 400/s, under PrefetchAhead
	if _, ok := k.Want(clk.Now(), 1); !ok {
		t.Fatal("did not ask again when held units run low")
	}
	k.Installed(clk.Now(), clk.Now(), 2, 400, 2*time.Second, "g")
	clk.both(1600 * time.Millisecond) // newest grant in its last quarter
	if _, ok := k.Want(clk.Now(), 1); !ok {
		t.Fatal("did not ask again when the newest grant nears its deadline")
	}
	k.Failed(clk.Now())

	cold := testKey(cfg, clk)
	if want, _ := cold.Want(clk.Now(), 0); want != cfg.MinWant {
		t.Fatalf("a key with no demand asked for %d, want MinWant %d", want, cfg.MinWant)
	}
	cold.fetching = false
	if want, _ := cold.Want(clk.Now(), 50); want != 50 {
		t.Fatalf("a hit of cost 50 asked for %d, want its cost", want)
	}
	app := testKey(AppConfig(2*time.Second), clk)
	for range 1000 {
		app.Demand(clk.Now(), 1)
	}
	if want, _ := app.Want(clk.Now(), 1); want != 100 {
		t.Fatalf("an application asked for %d, want its MaxWant 100", want)
	}
}

// A grant of nothing refuses the key locally until Recheck (or the
// budget's own retry, if sooner), then it asks again; a failure refuses
// nothing and backs off.
func TestSpentBudgetRefusesUntilRecheckAndFailureBacksOff(t *testing.T) {
	clk := newFakeClock()
	k := testKey(NodeConfig(), clk)
	k.Want(clk.Now(), 1)
	k.Exhausted(clk.Now(), 10*time.Second, "spent")
	if !k.Refusing(clk.Now()) {
		t.Fatal("a spent budget is not refused locally")
	}
	if ra := k.RetryAfter(clk.Now()); ra != 10*time.Second {
		t.Fatalf("retry after %s, want the budget's 10s", ra)
	}
	if _, ok := k.Want(clk.Now(), 1); ok {
		t.Fatal("asked again before Recheck")
	}
	clk.both(50 * time.Millisecond)
	if k.Refusing(clk.Now()) {
		t.Fatal("still refusing after Recheck")
	}
	if _, ok := k.Want(clk.Now(), 1); !ok {
		t.Fatal("did not ask again after Recheck")
	}
	if !k.Refusing(clk.Now()) {
		t.Fatal("not refusing while the recheck is in flight")
	}
	k.Exhausted(clk.Now(), 20*time.Millisecond, "spent")
	clk.both(20 * time.Millisecond)
	if k.Refusing(clk.Now()) {
		t.Fatal("refusing past the budget's own retry time")
	}

	f := testKey(NodeConfig(), clk)
	f.Want(clk.Now(), 1)
	f.Failed(clk.Now())
	if f.Refusing(clk.Now()) {
		t.Fatal("a failed request refuses: it must leave the decision to the cluster")
	}
	if _, ok := f.Want(clk.Now(), 1); ok {
		t.Fatal("asked again at once after a failure")
	}
	clk.both(50 * time.Millisecond)
	if _, ok := f.Want(clk.Now(), 1); !ok {
		t.Fatal("did not ask again after the backoff")
	}
}

// A key with no hit for CoolAfter is idle and hands back what it holds;
// drained grants come out for release.
func TestIdleKeyRetiresAndDrainedGrantsRelease(t *testing.T) {
	clk := newFakeClock()
	k := testKey(NodeConfig(), clk)
	grant(t, k, clk, 4, 10*time.Second)
	k.Demand(clk.Now(), 1)
	k.Spend(clk.Now(), 1)
	clk.both(999 * time.Millisecond)
	if k.Idle(clk.Now()) {
		t.Fatal("idle before CoolAfter")
	}
	clk.both(time.Millisecond)
	if !k.Idle(clk.Now()) {
		t.Fatal("not idle after CoolAfter")
	}
	k.fetching = true
	k.Installed(clk.Now(), clk.Now(), 2, 1, 10*time.Second, "g")
	k.Spend(clk.Now(), 1) // grant 1 has the earlier deadline: it pays
	k.Spend(clk.Now(), 2)
	if d := k.TakeDrained(nil); len(d) != 1 || d[0].ID != 1 {
		t.Fatalf("drained %+v, want grant 1", d)
	}
	if back := k.Retire(nil); len(back) != 1 || back[0].ID != 2 || back[0].Left != 1 {
		t.Fatalf("retired %+v, want grant 2 with 1 left", back)
	}
	if u, live := k.Held(clk.Now()); u != 0 || live {
		t.Fatalf("after Retire the key holds %d (live %v)", u, live)
	}
}

// The hot path does not allocate.
func TestSpendDoesNotAllocate(t *testing.T) {
	clk := newFakeClock()
	k := testKey(NodeConfig(), clk)
	grant(t, k, clk, 1<<40, time.Hour)
	if a := testing.AllocsPerRun(1000, func() {
		k.Demand(clk.Now(), 1)
		k.Spend(clk.Now(), 1)
		k.Refusing(clk.Now())
	}); a != 0 {
		t.Fatalf("%v allocations per decision", a)
	}
}

func TestConfigsAreValid(t *testing.T) {
	for _, c := range []Config{NodeConfig(), AppConfig(DefaultLease)} {
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	if err := (Config{}).Validate(); err == nil {
		t.Fatal("a zero config is valid")
	}
}

// A refund goes back to live grants only, never more than was spent from
// them: a holder never holds more than it was granted.
func TestRefundGivesBackOnlyWhatWasSpent(t *testing.T) {
	clk := newFakeClock()
	k := testKey(NodeConfig(), clk)
	grant(t, k, clk, 10, time.Second)
	k.Spend(clk.Now(), 4)
	if got := k.Refund(clk.Now(), 10); got != 4 {
		t.Fatalf("refunded %d into a grant that spent 4", got)
	}
	if got := k.Available(clk.Now()); got != 10 {
		t.Fatalf("%d available after the refund, want the 10 granted", got)
	}
	k.Spend(clk.Now(), 3)
	clk.both(time.Second)
	if got := k.Refund(clk.Now(), 3); got != 0 {
		t.Fatalf("refunded %d into an expired grant", got)
	}
}
