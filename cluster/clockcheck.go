package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Clock discipline (CockroachDB's --max-offset is the anchor). The leader
// stamps every hit with its clock and the state machine never lets time
// run back, so a leader whose clock is ahead would move the cluster's time
// forward for good and every open window would lapse early. Each node
// therefore measures its clock against its peers once a second (a small
// request to each; the offset is known to within half the round trip),
// and a node whose clock disagrees with a quorum of the voters by more
// than MaxClockOffset refuses to lead: its vote requests are not sent (it
// still votes for others), a leader that finds itself off hands
// leadership to a peer and stamps nothing more, and a transfer to it is
// refused.

// ClockReading is one node's clock as its peers see it.
type ClockReading struct {
	ID    string `json:"id"`
	NowMs int64  `json:"nowMs"`
}

// ErrClockSkew marks refusals caused by a clock too far off.
var ErrClockSkew = errors.New("this node's clock is off from the cluster's by more than --max-clock-offset")

type peerOffset struct {
	offsetMs int64 // peer minus this node
	boundMs  int64 // half the round trip
	at       time.Time
}

// clockCheck is the node's view of its clock against its peers.
type clockCheck struct {
	mu      sync.Mutex
	offsets map[string]peerOffset
	skewed  atomic.Bool
	// estimate is this node's offset from the median peer (ms).
	estimate atomic.Int64
	// kick asks for a check now (on gaining leadership) rather than at
	// the next tick.
	kick chan struct{}
}

// checkNow asks the clock check to run at once; it never blocks.
func (c *clockCheck) checkNow() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// ClockReading reports this node's clock (with any debug skew).
func (n *Node) ClockReading() ClockReading {
	return ClockReading{ID: n.cfg.ID, NowMs: n.clock.wallNowMs()}
}

// ClockSkewed reports whether this node refuses to lead because of its clock.
func (n *Node) ClockSkewed() bool { return n.clockCheck.skewed.Load() }

// runClockCheck is owned by the Node (started in Open, stopped by Close).
func (n *Node) runClockCheck() {
	defer n.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		case <-n.clockCheck.kick:
		}
		n.measureClocks()
		n.judgeClock()
	}
}

func (n *Node) measureClocks() {
	cf := n.raft.GetConfiguration()
	if cf.Error() != nil {
		return
	}
	for _, s := range cf.Configuration().Servers {
		if id := string(s.ID); id != n.cfg.ID {
			n.measurePeer(id)
		}
	}
}

// measurePeer takes one reading of a peer's clock and records it; false
// when the peer could not be read.
func (n *Node) measurePeer(id string) bool {
	meta, ok := n.fsm.Node(id)
	if !ok || meta.HTTPAddr == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	var rd ClockReading
	err := n.fwd.peers.getJSON(ctx, BaseURL(meta.HTTPAddr)+ClockPath, &rd)
	rtt := time.Since(start)
	if err != nil || rd.ID != id {
		return false
	}
	mid := start.UnixMilli() + n.clock.debugOffset.Load() + rtt.Milliseconds()/2
	n.clockCheck.mu.Lock()
	defer n.clockCheck.mu.Unlock()
	if n.clockCheck.offsets == nil {
		n.clockCheck.offsets = map[string]peerOffset{}
	}
	n.clockCheck.offsets[id] = peerOffset{offsetMs: rd.NowMs - mid, boundMs: rtt.Milliseconds()/2 + 1, at: time.Now()}
	return true
}

// judgeClock decides whether this node may lead: not while its clock
// disagrees (by more than MaxClockOffset plus the measurement's bound) with
// as many voters as make a quorum. Each peer's latest measurement counts,
// even when it is down now, so after a leader dies a healthy survivor
// still trusts its clock and the skewed one still distrusts its own.
// (With two voters nobody can tell which clock is wrong; neither refuses.)
func (n *Node) judgeClock() {
	cf := n.raft.GetConfiguration()
	if cf.Error() != nil {
		return
	}
	maxOff := n.cfg.MaxClockOffset.Milliseconds()
	voters := map[string]bool{}
	for _, s := range cf.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			voters[string(s.ID)] = true
		}
	}
	n.clockCheck.mu.Lock()
	var offs []int64
	disagree := 0
	for id, o := range n.clockCheck.offsets {
		if _, member := voters[id]; !member {
			delete(n.clockCheck.offsets, id)
			continue
		}
		offs = append(offs, o.offsetMs)
		if abs(o.offsetMs)-o.boundMs > maxOff {
			disagree++
		}
	}
	n.clockCheck.mu.Unlock()
	if len(offs) > 0 {
		slices.Sort(offs)
		n.clockCheck.estimate.Store(-offs[len(offs)/2])
	}
	quorum := len(voters)/2 + 1
	skewed := len(voters) > 2 && disagree >= quorum
	was := n.clockCheck.skewed.Swap(skewed)
	switch {
	case skewed && !was:
		n.log.Error("CLOCK SKEW: this node's clock is off from a quorum of the cluster by more than --max-clock-offset; it refuses to lead until it is fixed (check NTP)",
			"offset", time.Duration(n.clockCheck.estimate.Load())*time.Millisecond, "max", n.cfg.MaxClockOffset, "disagreeing_voters", disagree, "voters", len(voters))
	case !skewed && was:
		n.log.Warn("clock back within --max-clock-offset of the cluster; this node may lead again", "offset", time.Duration(n.clockCheck.estimate.Load())*time.Millisecond)
	}
	if skewed && n.IsLeader() {
		n.stepDownForClock()
	}
}

// stepDownForClock hands leadership to the peer whose clock agrees best.
func (n *Node) stepDownForClock() {
	target, ok := n.bestClockPeer()
	n.log.Error("CLOCK SKEW: stepping down as leader", "to", target)
	var f raft.Future
	if ok {
		f = n.raft.LeadershipTransferToServer(raft.ServerID(target.ID), target.Address)
	} else {
		f = n.raft.LeadershipTransfer()
	}
	if err := f.Error(); err != nil {
		n.log.Error("CLOCK SKEW: leadership transfer failed; still refusing to stamp hits", "error", err)
	}
}

// bestClockPeer is the voter (not this node) whose clock is closest to the
// median of the peers' clocks.
func (n *Node) bestClockPeer() (raft.Server, bool) {
	cf := n.raft.GetConfiguration()
	if cf.Error() != nil {
		return raft.Server{}, false
	}
	n.clockCheck.mu.Lock()
	defer n.clockCheck.mu.Unlock()
	median := -n.clockCheck.estimate.Load()
	var best raft.Server
	bestDist := int64(-1)
	for _, s := range cf.Configuration().Servers {
		o, ok := n.clockCheck.offsets[string(s.ID)]
		if s.ID == raft.ServerID(n.cfg.ID) || s.Suffrage != raft.Voter || !ok {
			continue
		}
		if d := abs(o.offsetMs - median); bestDist < 0 || d < bestDist {
			best, bestDist = s, d
		}
	}
	return best, bestDist >= 0
}

// peerSkewed reports whether this node measures id's clock as off by more
// than MaxClockOffset from its own (used to refuse a transfer to it).
func (n *Node) peerSkewed(id string) (bool, int64) {
	n.clockCheck.mu.Lock()
	defer n.clockCheck.mu.Unlock()
	o, ok := n.clockCheck.offsets[id]
	if !ok {
		return false, 0
	}
	return abs(o.offsetMs)-o.boundMs > n.cfg.MaxClockOffset.Milliseconds(), o.offsetMs
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// voteGate is the node's Raft transport with one change: while the
// node's clock is off it does not ask for votes, so it cannot win an
// election (it still answers others' requests and votes for them).
type voteGate struct {
	*raft.NetworkTransport
	n *Node
}

func (g voteGate) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if g.n.clockCheck.skewed.Load() {
		return fmt.Errorf("not asking %s for a vote: %w", id, ErrClockSkew)
	}
	return g.NetworkTransport.RequestVote(id, target, args, resp)
}

func (g voteGate) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if g.n.clockCheck.skewed.Load() {
		return fmt.Errorf("not asking %s for a pre-vote: %w", id, ErrClockSkew)
	}
	return g.NetworkTransport.RequestPreVote(id, target, args, resp)
}
