package cluster

import (
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func voterSet(ids ...string) map[string]bool {
	m := map[string]bool{}
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// A node may lead only while a majority of the voters, itself included,
// confirm its clock with a recent reading; missing, stale and disagreeing
// readings count against it, and a reading's bound is in its favour.
func TestClockMonitorJudgesByMajority(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	m := newClockMonitor("n1", 500*time.Millisecond, clock.now)
	three := voterSet("n1", "n2", "n3")

	if v := m.judge(three); !v.skewed || v.quorum != 2 || len(v.agreeing) != 1 {
		t.Fatalf("no readings yet: %+v, want skewed (only itself agrees)", v)
	}
	m.record("n2", 100, 1)
	if v := m.judge(three); v.skewed || !slices.Equal(v.agreeing, []string{"n1", "n2"}) {
		t.Fatalf("one peer agrees: %+v, want confirmed by n1 and n2", v)
	}
	m.record("n2", 900, 1)
	m.record("n3", -800, 1)
	if v := m.judge(three); !v.skewed || v.estimateMs != -900 {
		t.Fatalf("both peers disagree: %+v, want skewed", v)
	}
	m.record("n2", 700, 250) // off by 700 but the reading is only good to 250: agrees
	if v := m.judge(three); v.skewed {
		t.Fatalf("a reading within its bound: %+v, want confirmed", v)
	}

	clock.t = clock.t.Add(clockReadingTTL + time.Second)
	if v := m.judge(three); !v.skewed || v.haveEstimate {
		t.Fatalf("readings gone stale: %+v, want skewed and no estimate", v)
	}
	m.record("n3", 0, 1)
	if v := m.judge(three); v.skewed || v.estimateMs != 0 {
		t.Fatalf("a fresh reading: %+v", v)
	}

	// A node that is not a voter is never marked; readings of servers
	// that left are forgotten.
	if v := m.judge(voterSet("n2", "n3", "n4")); v.skewed {
		t.Fatalf("non-voter marked: %+v", v)
	}
	if _, ok := m.offsets["n1"]; ok {
		t.Fatal("kept a reading of a non-voter")
	}
}

// Leadership goes to the agreeing voter closest to the peers' median; a
// transfer to a peer whose clock is off is refused.
func TestClockMonitorBestPeerAndPeerSkew(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	m := newClockMonitor("n1", 500*time.Millisecond, clock.now)
	servers := []raft.Server{{ID: "n1", Suffrage: raft.Voter}, {ID: "n2", Suffrage: raft.Voter}, {ID: "n3", Suffrage: raft.Voter},
		{ID: "n4", Suffrage: raft.Nonvoter}, {ID: "n5", Suffrage: raft.Voter}}
	m.record("n2", 300, 1)
	m.record("n3", 50, 1)
	m.record("n4", 0, 1)    // not a voter
	m.record("n5", 2000, 1) // off
	if best, ok := m.best(servers, 100); !ok || best.ID != "n3" {
		t.Fatalf("best %v %v, want n3", best, ok)
	}
	if off, ms := m.peerSkewed("n5"); !off || ms != 2000 {
		t.Fatalf("n5: %v %d, want skewed by 2000", off, ms)
	}
	if off, _ := m.peerSkewed("n2"); off {
		t.Fatal("n2 taken for skewed")
	}
	clock.t = clock.t.Add(clockReadingTTL + time.Second)
	if _, ok := m.best(servers, 100); ok {
		t.Fatal("a stale reading chosen for a transfer")
	}
}

// A node whose own wall clock steps after it read its peers judges those
// readings by the step: a peer it can no longer reach (a killed leader)
// must not keep confirming a clock that is now 20 s off (issue 34, where
// such a node won the election and moved cluster time 20 s on).
func TestClockMonitorCorrectsReadingsForItsOwnStep(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)} // the monotonic clock
	var step int64
	m := newClockMonitor("n1", 500*time.Millisecond, clock.now)
	m.wallMs = func() int64 { return clock.t.UnixMilli() + step }
	three := voterSet("n1", "n2", "n3")
	m.record("n2", 10, 1)
	if v := m.judge(three); v.skewed {
		t.Fatalf("before the step: %+v, want confirmed", v)
	}
	step = 20_000
	clock.t = clock.t.Add(100 * time.Millisecond)
	if v := m.judge(three); !v.skewed || v.estimateMs < 19_000 {
		t.Fatalf("after this node's clock stepped 20 s: %+v, want skewed, about 20 s off", v)
	}
	if off, ms := m.peerSkewed("n2"); !off || ms > -19_000 {
		t.Fatalf("n2 as seen after the step: skewed %v by %d ms; want about -20 s", off, ms)
	}
	step = 0
	if v := m.judge(three); v.skewed {
		t.Fatalf("step undone: %+v, want confirmed again", v)
	}
}
