package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/fsm"
)

// Clock discipline (CockroachDB's --max-offset is the anchor). The leader
// stamps every hit with its clock and the state machine never lets time
// run back, so a leader whose clock is ahead would move the cluster's time
// forward for good and every open window would lapse early. Each node
// therefore measures its clock against its peers once a second (a small
// request to each; the offset is known to within half the round trip),
// and a node may lead only while a majority of the voters, itself
// included, have recent readings that agree with its clock within
// MaxClockOffset. A voter whose reading is missing or stale (down,
// unreachable, or not measured since this node restarted) counts against
// it: the attack this closes is a node restarted with a bad clock while
// one voter is down, which had no disagreeing reading yet and led.
//
// hashicorp/raft has no hook to veto a candidacy, so a node that cannot
// establish agreement (i) does not ask for votes or pre-votes (voteGate;
// it still votes for others), (ii) as leader stamps no hits (applyBatch
// fails them as not counted) and hands leadership to a peer whose clock
// agrees, if it has one, and (iii) is refused as a transfer target. The
// price is availability: with one of three voters down and another
// skewed, no node can establish a majority and hits fail until a clock
// is fixed or the voter returns. For a limiter that is the safe side.

// ClockReading is one node's clock as its peers see it, with its release
// and log format for the version gate (gate.go); releases before the gate
// send neither, and older readers ignore them.
type ClockReading struct {
	ID    string `json:"id"`
	NowMs int64  `json:"nowMs"`
	// ClusterNowMs is the node's estimate of cluster time (0: none yet),
	// a lower bound a restarted node continues from (cluster/clock.go).
	ClusterNowMs int64      `json:"clusterNowMs,omitempty"`
	Version      string     `json:"version,omitempty"`
	Format       fsm.Format `json:"format,omitempty"`
}

// ErrClockSkew marks refusals caused by a clock too far off.
var ErrClockSkew = errors.New("this node cannot confirm its clock with a majority of the voters (off by more than --max-clock-offset, or voters down or unread)")

// clockReadingTTL is how long a peer's reading counts (readings are
// taken each second; a few may fail under load).
const clockReadingTTL = 10 * time.Second

// clockCheck is the node's view of its clock against its peers.
type clockCheck struct {
	// monitor holds the readings and judges them (clockmonitor.go).
	monitor *clockMonitor
	// skewed is set while this node is a voter that cannot establish its
	// clock with a majority of the voters: it must not lead. It starts set
	// (Open), so a restarted node does not stand before its first
	// judgment; judged records that one was made (clock goroutine only).
	skewed atomic.Bool
	judged bool
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
	cluster, _ := n.clock.clusterNowMs()
	return ClockReading{ID: n.cfg.ID, NowMs: n.clock.wallNowMs(), ClusterNowMs: cluster, Version: n.cfg.Version, Format: n.format()}
}

// stampNow is the time of the next entry this leader writes, or why it
// may not stamp one: its clock is not confirmed by a majority (or
// stepped since it was; the check then runs at once), or as a new leader
// it has not applied the cluster's time yet.
//
// grant: the entry is a lease grant; call n.clock.grantDone once it
// applied or failed.
func (n *Node) stampNow(grant bool) (int64, error) {
	if n.clockCheck.skewed.Load() {
		return 0, ErrClockSkew
	}
	term := n.raft.CurrentTerm()
	now, err := n.clock.stamp(term, n.readyTerm.Load() == term, n.fsm.GrantsUntil, grant)
	if errors.Is(err, errClockStepped) {
		n.clockCheck.checkNow()
	}
	return now, err
}

// ClockSkewed reports whether this node refuses to lead because of its clock.
func (n *Node) ClockSkewed() bool { return n.clockCheck.skewed.Load() }

// runClockCheck is owned by the Node (started in Open, stopped by Close).
func (n *Node) runClockCheck() {
	defer n.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for tick := 0; ; tick++ {
		if tick > 0 {
			select {
			case <-n.stop:
				return
			case <-t.C:
			case <-n.clockCheck.kick:
			}
		}
		wall, mono := n.clock.src.WallMs(), n.clock.src.Mono()
		n.measureClocks()
		n.judgeClock(wall, mono)
		n.noteClusterFormat()
		if tick%5 == 0 {
			// Host names may need DNS: not every second.
			n.refreshPeerIPs()
		}
	}
}

func (n *Node) measureClocks() {
	cf := n.raft.GetConfiguration()
	if cf.Error() != nil {
		return
	}
	members := map[string]bool{}
	unknown := false
	for _, s := range cf.Configuration().Servers {
		if id := string(s.ID); id != n.cfg.ID {
			members[id] = true
			if addr, ok := n.peerHTTPAddr(id); ok {
				n.measurePeer(id, addr)
			} else {
				unknown = true
			}
		}
	}
	if unknown {
		n.probeJoinAddrs(members)
	}
}

// probeJoinAddrs reads the clocks behind the --join addresses and keeps
// the readings, and the addresses, of members whose address was unknown.
func (n *Node) probeJoinAddrs(members map[string]bool) {
	for _, addr := range n.cfg.JoinAddrs {
		rd, off, ok := n.readClock(addr)
		if !ok || !members[rd.ID] {
			continue
		}
		if _, known := n.peerHTTPAddr(rd.ID); known {
			continue
		}
		n.recordOffset(rd.ID, off)
		n.formats.record(rd)
		n.peerAddrs.merge(map[string]string{rd.ID: addr})
	}
}

// measurePeer takes one reading of member id's clock at addr and records
// it; false when the peer could not be read.
func (n *Node) measurePeer(id, addr string) bool {
	rd, off, ok := n.readClock(addr)
	if !ok || rd.ID != id {
		return false
	}
	n.recordOffset(id, off)
	n.formats.record(rd)
	return true
}

// readClock reads the clock of the node at addr: its answer, and its
// offset from this node's clock (known within half the round trip).
func (n *Node) readClock(addr string) (ClockReading, peerOffset, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	var rd ClockReading
	err := n.fwd.peers.getJSON(ctx, BaseURL(addr)+ClockPath, &rd)
	rtt := time.Since(start)
	if err != nil || rd.ID == "" {
		return rd, peerOffset{}, false
	}
	n.clock.observePeer(rd.ClusterNowMs, n.clock.src.Mono())
	mid := start.UnixMilli() + n.clock.debugOffset.Load() + rtt.Milliseconds()/2 // the wall clock as the leader clock reads it
	return rd, peerOffset{offsetMs: rd.NowMs - mid, boundMs: rtt.Milliseconds()/2 + 1}, true
}

// recordOffset keeps a reading of member id's clock (the monitor stamps
// it with its own clock).
func (n *Node) recordOffset(id string, o peerOffset) {
	n.clockCheck.monitor.record(id, o.offsetMs, o.boundMs)
}

// judgeClock decides whether this node may lead: only while a majority of
// the voters, itself included, have a recent reading (clockReadingTTL)
// that agrees with its clock within MaxClockOffset (plus the reading's
// bound). Missing and stale readings count against it. A node that is not
// a voter cannot lead anyway and is never marked.
//
// wall and mono are both clocks when the readings were taken: the leader
// clock refuses to stamp once the wall clock moved against the monotonic
// one since then (a step the next judgment has not seen yet).
func (n *Node) judgeClock(wall int64, mono time.Duration) {
	cf := n.raft.GetConfiguration()
	if cf.Error() != nil {
		return
	}
	voters := map[string]bool{}
	for _, s := range cf.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			voters[string(s.ID)] = true
		}
	}
	v := n.clockCheck.monitor.judge(voters)
	if v.haveEstimate {
		n.clockCheck.estimate.Store(v.estimateMs)
	}
	skewed := v.skewed
	was := n.clockCheck.skewed.Swap(skewed) && n.clockCheck.judged
	n.clockCheck.judged = true
	n.clock.confirm(!skewed, wall, mono)
	args := []any{"offset", time.Duration(n.clockCheck.estimate.Load()) * time.Millisecond, "max", n.cfg.MaxClockOffset,
		"agreeing_voters", len(v.agreeing), "voters", v.voters, "need", v.quorum, "agreeing", v.agreeing}
	switch {
	case skewed && !was:
		n.log.Error("CLOCK: this node cannot confirm its clock with a majority of the voters (a clock off by more than --max-clock-offset, "+
			"or voters down or unreadable: missing readings count against it); it refuses to lead and to stamp hits until it can (check NTP and the other voters)", args...)
	case !skewed && was:
		n.log.Warn("clock confirmed by a majority of the voters; this node may lead again", args...)
	}
	if skewed && n.IsLeader() {
		n.stepDownForClock()
	}
}

// stepDownForClock hands leadership to the peer whose clock agrees best
// with this node's, if one agrees at all; a peer that disagrees could not
// confirm its own clock either (and refuses to stand). Without one the
// node stays leader in Raft's eyes but stamps nothing.
func (n *Node) stepDownForClock() {
	target, ok := n.bestClockPeer()
	if !ok {
		n.log.Error("CLOCK: no voter's clock agrees with this leader's; not stamping hits until a majority does")
		return
	}
	n.log.Error("CLOCK: stepping down as leader", "to", target.ID)
	if err := n.raft.LeadershipTransferToServer(raft.ServerID(target.ID), target.Address).Error(); err != nil {
		n.log.Error("CLOCK SKEW: leadership transfer failed; still refusing to stamp hits", "error", err)
	}
}

// bestClockPeer is the voter (not this node) with a recent reading that
// agrees with this node's clock, closest to the median of the peers'.
func (n *Node) bestClockPeer() (raft.Server, bool) {
	cf := n.raft.GetConfiguration()
	if cf.Error() != nil {
		return raft.Server{}, false
	}
	return n.clockCheck.monitor.best(cf.Configuration().Servers, -n.clockCheck.estimate.Load())
}

// peerSkewed reports whether this node measures id's clock as off by more
// than MaxClockOffset from its own (used to refuse a transfer to it).
func (n *Node) peerSkewed(id string) (bool, int64) { return n.clockCheck.monitor.peerSkewed(id) }

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
