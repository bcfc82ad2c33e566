package cluster

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// fakePeers is a node as its clock check sees it: three voters whose
// clocks are offsets from this node's, and a record of transfers.
type fakePeers struct {
	ids         []string         // the other voters
	offsets     map[string]int64 // peer clock minus this node's (ms); absent: unreachable
	leader      bool
	transferred []raft.ServerID
}

func (p *fakePeers) servers() ([]raft.Server, bool) {
	var out []raft.Server
	for _, id := range append([]string{"n1"}, p.ids...) {
		out = append(out, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(id + ":raft"), Suffrage: raft.Voter})
	}
	return out, true
}
func (p *fakePeers) httpAddr(id string) (string, bool) { return id, true }
func (p *fakePeers) joinAddrs() []string               { return nil }
func (p *fakePeers) learnAddr(string, string)          {}
func (p *fakePeers) isLeader() bool                    { return p.leader }
func (p *fakePeers) transfer(to raft.Server) error {
	p.transferred = append(p.transferred, to.ID)
	return nil
}
func (p *fakePeers) readClock(addr, want string) (ClockReading, peerOffset, readResult) {
	off, ok := p.offsets[addr]
	if !ok {
		return ClockReading{}, peerOffset{}, readUnreached
	}
	if want != "" && want != addr {
		return ClockReading{}, peerOffset{}, readUnproven
	}
	return ClockReading{ID: addr}, peerOffset{offsetMs: off, boundMs: 1}, readProven
}

func newTestClockCheck(p *fakePeers) *clockCheck {
	var real int64
	src := &simSource{real: &real}
	lc := &leaderClock{}
	lc.init(src, 500*time.Millisecond)
	return newClockCheck("n1", 500*time.Millisecond, p, newPeerFormats(time.Now), lc, hclog.NewNullLogger())
}

// The clock discipline as a type over its node (clockPeers), without a
// cluster: a node confirmed by a majority may stamp; one whose clock the
// majority rejects may not, and as leader hands the lead to the peer that
// agrees; a step of its own clock after the readings counts at once.
func TestClockCheckJudgesAndStepsDown(t *testing.T) {
	p := &fakePeers{ids: []string{"n2", "n3"}, offsets: map[string]int64{"n2": 10, "n3": -20}}
	c := newTestClockCheck(p)
	if !c.skewed.Load() {
		t.Fatal("a node that has not judged its clock yet may lead")
	}
	c.round()
	if c.skewed.Load() {
		t.Fatal("confirmed by both peers, still skewed")
	}
	if _, err := c.clock.stamp(1, true, func() int64 { return 0 }, false); err != nil {
		t.Fatalf("a confirmed clock refused to stamp: %v", err)
	}
	// This node's wall clock steps 20 s after the readings: the leader
	// clock refuses to stamp before the next round, and the round judges
	// the old readings by the step (nobody answers it): skewed, and as
	// leader with no peer agreeing it hands the lead to nobody.
	c.clock.src.(*simSource).wallOff = 20_000
	if _, err := c.clock.stamp(1, true, func() int64 { return 0 }, false); err == nil {
		t.Fatal("stamped with a wall clock stepped since the judgment")
	}
	p.offsets, p.leader = map[string]int64{}, true
	c.round()
	if !c.skewed.Load() || len(p.transferred) != 0 {
		t.Fatalf("own clock stepped 20 s: skewed %v, transfers %v; want skewed (old readings judged by the step), no transfer", c.skewed.Load(), p.transferred)
	}
	if _, err := c.clock.stamp(1, true, func() int64 { return 0 }, false); err == nil {
		t.Fatal("a skewed leader stamped")
	}
}

// Five voters, two agreeing with this leader (itself and n2): not a
// majority, so it steps down, to n2.
func TestClockCheckStepsDownToAnAgreeingPeer(t *testing.T) {
	p := &fakePeers{ids: []string{"n2", "n3", "n4", "n5"}, leader: true,
		offsets: map[string]int64{"n2": 100, "n3": 2_000, "n4": 2_100, "n5": 1_900}}
	c := newTestClockCheck(p)
	c.round()
	if !c.skewed.Load() || len(p.transferred) != 1 || p.transferred[0] != "n2" {
		t.Fatalf("skewed %v, transfers %v; want skewed and the lead handed to n2", c.skewed.Load(), p.transferred)
	}
}
