package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
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

// clockPeers is what the clock check needs from its node: the Raft
// configuration, where members answer, one reading of a clock (the I/O),
// and a way to hand the lead on. The node adapts itself (nodeClockPeers);
// tests give a fake, so the check runs without a cluster.
type clockPeers interface {
	// servers is the Raft configuration (nil, false when unreadable).
	servers() ([]raft.Server, bool)
	// httpAddr is member id's HTTP address, when known.
	httpAddr(id string) (string, bool)
	// joinAddrs are the --join addresses, read when a member's address is
	// unknown; learnAddr keeps one found there.
	joinAddrs() []string
	learnAddr(id, addr string)
	// readClock reads the node at addr, which must prove to be member
	// want ("": any member, the one its reading names;
	// clockproof.go): its answer, and its offset from this node's clock
	// (known within half the round trip).
	readClock(addr, want string) (ClockReading, peerOffset, readResult)
	// isLeader and transfer: stepping down for a clock that is off.
	isLeader() bool
	transfer(to raft.Server) error
}

// clockCheck is the clock discipline: this node's clock against its
// peers' (measured once a second), the verdict whether it may lead, and
// the step-down when it may not. It owns the readings (monitor) and
// tells the version gate each member's format (formats) and the leader
// clock each judgment (clock).
type clockCheck struct {
	self    string
	maxOff  time.Duration
	peers   clockPeers
	formats *peerFormats
	clock   *leaderClock
	log     hclog.Logger
	// monitor holds the readings and judges them (clockmonitor.go).
	monitor *clockMonitor
	// skewed is set while this node is a voter that cannot establish its
	// clock with a majority of the voters: it must not lead. It starts set
	// (newClockCheck), so a restarted node does not stand before its first
	// judgment; judged records that one was made (clock goroutine only).
	skewed atomic.Bool
	judged bool
	// estimate is this node's offset from the median peer (ms).
	estimate atomic.Int64
	// kick asks for a check now (on gaining leadership, or a leader
	// clock that stepped) rather than at the next tick.
	kick chan struct{}
	// continues: when each member last reported its estimate of cluster
	// time, which only releases that stamp by the continuous rule
	// (clock.go) do; while some voter has not, a leader of an earlier
	// release may still move cluster time to its own clock.
	contMu    sync.Mutex
	continues map[string]time.Time
}

func newClockCheck(self string, maxOff time.Duration, peers clockPeers, formats *peerFormats, clock *leaderClock, log hclog.Logger) *clockCheck {
	c := &clockCheck{self: self, maxOff: maxOff, peers: peers, formats: formats, clock: clock, log: log, kick: make(chan struct{}, 1),
		continues: map[string]time.Time{}}
	c.monitor = newClockMonitor(self, maxOff, time.Now)
	c.monitor.wallMs = clock.src.WallMs
	c.skewed.Store(true) // until the clock check has judged (round)
	return c
}

// checkNow asks the clock check to run at once; it never blocks.
func (c *clockCheck) checkNow() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// round is one pass: read every member's clock, then judge this node's.
// Both clocks are read first: the leader clock refuses to stamp once
// the wall clock moved against the monotonic one since then (a step the
// next judgment has not seen yet).
func (c *clockCheck) round() {
	wall, mono := c.clock.src.WallMs(), c.clock.src.Mono()
	c.measure()
	c.judge(wall, mono)
}

func (c *clockCheck) measure() {
	servers, ok := c.peers.servers()
	if !ok {
		return
	}
	members := map[string]bool{}
	unknown := false
	for _, s := range servers {
		if id := string(s.ID); id != c.self {
			members[id] = true
			if addr, ok := c.peers.httpAddr(id); ok {
				c.measurePeer(id, addr)
			} else {
				unknown = true
			}
		}
	}
	if unknown {
		c.probeJoinAddrs(members)
	}
}

// probeJoinAddrs reads the clocks behind the --join addresses and keeps
// the readings, and the addresses, of members whose address was unknown.
func (c *clockCheck) probeJoinAddrs(members map[string]bool) {
	for _, addr := range c.peers.joinAddrs() {
		rd, off, res := c.peers.readClock(addr, "")
		if res != readProven || !members[rd.ID] {
			continue
		}
		if _, known := c.peers.httpAddr(rd.ID); known {
			continue
		}
		c.record(rd, off)
		c.peers.learnAddr(rd.ID, addr)
	}
}

// measurePeer takes one reading of member id's clock at addr and records
// it; false when the peer could not be read.
func (c *clockCheck) measurePeer(id, addr string) bool {
	rd, off, res := c.peers.readClock(addr, id)
	if res != readProven {
		return false
	}
	c.record(rd, off)
	return true
}

// record keeps a reading: the offset for the monitor, the format for the
// gate, the peer's estimate of cluster time for the leader clock.
func (c *clockCheck) record(rd ClockReading, o peerOffset) {
	c.monitor.record(rd.ID, o.offsetMs, o.boundMs)
	c.formats.record(rd)
	c.clock.observePeer(rd.ClusterNowMs, c.clock.src.Mono())
	if rd.ClusterNowMs > 0 {
		c.contMu.Lock()
		c.continues[rd.ID] = time.Now()
		c.contMu.Unlock()
	}
}

// votersContinueTime reports whether every other voter recently reported
// an estimate of cluster time, so whoever leads next stamps by the
// continuous rule and moves no window's end (lease.UsableFor then needs
// no clock-offset allowance at a window's end).
func (c *clockCheck) votersContinueTime() bool {
	servers, ok := c.peers.servers()
	if !ok {
		return false
	}
	c.contMu.Lock()
	defer c.contMu.Unlock()
	for _, s := range servers {
		if s.Suffrage != raft.Voter || string(s.ID) == c.self {
			continue
		}
		if at, ok := c.continues[string(s.ID)]; !ok || time.Since(at) > clockReadingTTL {
			return false
		}
	}
	return true
}

// judge decides whether this node may lead: only while a majority of
// the voters, itself included, have a recent reading (clockReadingTTL)
// that agrees with its clock within MaxClockOffset (plus the reading's
// bound). Missing and stale readings count against it. A node that is not
// a voter cannot lead anyway and is never marked. wall and mono are both
// clocks when the readings were taken (round).
func (c *clockCheck) judge(wall int64, mono time.Duration) {
	servers, ok := c.peers.servers()
	if !ok {
		return
	}
	voters := map[string]bool{}
	for _, s := range servers {
		if s.Suffrage == raft.Voter {
			voters[string(s.ID)] = true
		}
	}
	v := c.monitor.judge(voters)
	if v.haveEstimate {
		c.estimate.Store(v.estimateMs)
	}
	skewed := v.skewed
	was := c.skewed.Swap(skewed) && c.judged
	c.judged = true
	c.clock.confirm(!skewed, wall, mono)
	args := []any{"offset", time.Duration(c.estimate.Load()) * time.Millisecond, "max", c.maxOff,
		"agreeing_voters", len(v.agreeing), "voters", v.voters, "need", v.quorum, "agreeing", v.agreeing}
	switch {
	case skewed && !was:
		c.log.Error("CLOCK: this node cannot confirm its clock with a majority of the voters (a clock off by more than --max-clock-offset, "+
			"or voters down or unreadable: missing readings count against it); it refuses to lead and to stamp hits until it can (check NTP and the other voters)", args...)
	case !skewed && was:
		c.log.Warn("clock confirmed by a majority of the voters; this node may lead again", args...)
	}
	if skewed && c.peers.isLeader() {
		c.stepDown()
	}
}

// stepDown hands leadership to the peer whose clock agrees best with
// this node's, if one agrees at all; a peer that disagrees could not
// confirm its own clock either (and refuses to stand). Without one the
// node stays leader in Raft's eyes but stamps nothing.
func (c *clockCheck) stepDown() {
	target, ok := c.bestPeer()
	if !ok {
		c.log.Error("CLOCK: no voter's clock agrees with this leader's; not stamping hits until a majority does")
		return
	}
	c.log.Error("CLOCK: stepping down as leader", "to", target.ID)
	if err := c.peers.transfer(target); err != nil {
		c.log.Error("CLOCK SKEW: leadership transfer failed; still refusing to stamp hits", "error", err)
	}
}

// bestPeer is the voter (not this node) with a recent reading that
// agrees with this node's clock, closest to the median of the peers'.
func (c *clockCheck) bestPeer() (raft.Server, bool) {
	servers, ok := c.peers.servers()
	if !ok {
		return raft.Server{}, false
	}
	return c.monitor.best(servers, -c.estimate.Load())
}

// peerSkewed reports whether this node measures id's clock as off by more
// than MaxClockOffset from its own (used to refuse a transfer to it).
func (c *clockCheck) peerSkewed(id string) (bool, int64) { return c.monitor.peerSkewed(id) }

// ClockReading reports this node's clock (with any debug skew).
func (n *Node) ClockReading() ClockReading {
	cluster, _ := n.clock.clusterNowMs()
	return ClockReading{ID: n.cfg.ID, NowMs: n.clock.wallNowMs(), ClusterNowMs: cluster, Version: n.cfg.Version, Format: n.gate.format()}
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
		n.clockCheck.round()
		n.gate.noteCluster()
		if tick%5 == 0 {
			// Host names may need DNS: not every second.
			n.refreshPeerIPs()
		}
	}
}

// nodeClockPeers is the node as its clock check sees it.
type nodeClockPeers struct {
	n      *Node
	reader *clockReader
}

func (p nodeClockPeers) servers() ([]raft.Server, bool) {
	cf := p.n.raft.GetConfiguration()
	if cf.Error() != nil {
		return nil, false
	}
	return cf.Configuration().Servers, true
}

func (p nodeClockPeers) httpAddr(id string) (string, bool) { return p.n.peerHTTPAddr(id) }
func (p nodeClockPeers) joinAddrs() []string               { return p.n.cfg.JoinAddrs }
func (p nodeClockPeers) learnAddr(id, addr string) {
	p.n.peerAddrs.merge(map[string]string{id: addr})
}
func (p nodeClockPeers) isLeader() bool { return p.n.IsLeader() }
func (p nodeClockPeers) transfer(to raft.Server) error {
	return p.n.raft.LeadershipTransferToServer(to.ID, to.Address).Error()
}

func (p nodeClockPeers) readClock(addr, want string) (ClockReading, peerOffset, readResult) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	rd, start, rtt, res, err := p.reader.read(ctx, addr, want)
	if res == readUnproven {
		p.reader.warnUnproven(addr, want, err)
	}
	if res != readProven {
		return ClockReading{}, peerOffset{}, res
	}
	mid := start.UnixMilli() + p.n.clock.debugOffset.Load() + rtt.Milliseconds()/2 // the wall clock as the leader clock reads it
	return rd, peerOffset{offsetMs: rd.NowMs - mid, boundMs: rtt.Milliseconds()/2 + 1}, readProven
}

// voteGate is the node's Raft transport with one change: while the
// node's clock is off it does not ask for votes, so it cannot win an
// election (it still answers others' requests and votes for them).
type voteGate struct {
	*raft.NetworkTransport
	skewed *atomic.Bool // the clock check's verdict
}

func (g voteGate) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if g.skewed.Load() {
		return fmt.Errorf("not asking %s for a vote: %w", id, ErrClockSkew)
	}
	return g.NetworkTransport.RequestVote(id, target, args, resp)
}

func (g voteGate) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if g.skewed.Load() {
		return fmt.Errorf("not asking %s for a pre-vote: %w", id, ErrClockSkew)
	}
	return g.NetworkTransport.RequestPreVote(id, target, args, resp)
}
