package cluster

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/cluster/storage"
	"github.com/rlnode/rlnode/fsm"
)

// ErrClusterUpgrading marks a write the leader refused before the log
// because it needs a log or snapshot format that some voter cannot apply
// yet (the cluster version gate, cluster/DESIGN.md): nothing changed, and
// the same write succeeds once every voter runs a release that knows it.
var ErrClusterUpgrading = errors.New("the cluster is being upgraded")

// UpgradingError is the gate's refusal: the format the write needs, the
// cluster's effective format, and the voters behind (a voter whose format
// is unknown counts as behind).
type UpgradingError struct {
	Need      fsm.Format
	Effective fsm.Format
	Behind    []string
}

func (e *UpgradingError) Error() string {
	return fmt.Sprintf("%v: this write needs log format %d on every voter, the cluster runs format %d (behind: %s); upgrade them first",
		ErrClusterUpgrading, e.Need, e.Effective, strings.Join(e.Behind, ", "))
}

func (e *UpgradingError) Unwrap() error { return ErrClusterUpgrading }

// VersionGate is the cluster version gate: which log format every
// server of the configuration can apply, as the members' clock readings
// report it (clockcheck.go measures, peerFormats keeps), and the data
// dir's record of the newest format its log may hold (storage.FormatFile),
// raised once every member reported it and never lowered. It reaches the
// node only through gateNode, so it is tested without a cluster
// (gate_internal_test.go); Node.VersionGate returns it.
type VersionGate struct {
	self    string
	version string
	own     fsm.Format // the format this node applies and reports
	node    gateNode
	// readings are the members' releases and formats from their proven
	// clock readings (clockcheck.go records them).
	readings *peerFormats
	log      hclog.Logger

	// mark is the format the data dir records; mu makes raising it one
	// step.
	mark atomic.Uint32
	mu   sync.Mutex
}

// gateNode is what the gate needs of its node.
type gateNode interface {
	// servers is the Raft configuration (false when unreadable).
	servers() ([]raft.Server, bool)
	// leading reports whether this node leads; leader is the leader's id
	// and HTTP address ("" when none is known).
	leading() bool
	leader() (id, httpAddr string)
	// readMember reads member id's clock reading at addr at once (its
	// release and format), proven to be id's (clockproof.go).
	readMember(addr, id string) (ClockReading, readResult)
	// recordFormat records in the data dir that its log may hold entries
	// of format f (storage.RaiseFormat).
	recordFormat(f fsm.Format) error
	// upgraded reports whether the node started with state, when a raise
	// is news (a new cluster starts at its format).
	upgraded() bool
}

func newVersionGate(self, version string, own fsm.Format, node gateNode, readings *peerFormats, log hclog.Logger) *VersionGate {
	if own == 0 {
		own = fsm.CurrentFormat
	}
	return &VersionGate{self: self, version: version, own: own, node: node, readings: readings, log: log}
}

// loadMark sets the format the data dir records, as read at start.
func (g *VersionGate) loadMark(f fsm.Format) { g.mark.Store(uint32(f)) }

// format is the log format this node applies and reports.
func (g *VersionGate) format() fsm.Format { return g.own }

// RequireFormat returns nil when every voter can apply entries of format
// need, else an *UpgradingError. Call it on the leader, before the log,
// for any write that needs more than fsm.OldestFormat. Before it lets
// such a write through it records the format in the data dir
// (storage.RaiseFormat), so a build too old for what follows refuses
// this dir instead of halting on it; from then on the format stays open
// on this node.
func (g *VersionGate) RequireFormat(need fsm.Format) error {
	if need <= fsm.OldestFormat || need <= fsm.Format(g.mark.Load()) {
		// Once every member reported it, the format is never lowered
		// (CockroachDB's cluster version): entries of it may be in the
		// log already, so a member that goes silent since changes
		// nothing, and an older one may not join (checkJoiner).
		return nil
	}
	eff, members := g.MemberFormats()
	if need <= eff {
		return g.raise(eff)
	}
	var behind []string
	for _, m := range members {
		if m.Format < need {
			behind = append(behind, m.ID)
		}
	}
	return &UpgradingError{Need: need, Effective: eff, Behind: behind}
}

// requireLeader is the gate on the node asked, before it forwards a
// write that needs format need: a leader of an older release has no gate
// (and may not know the operation), so a follower refuses unless the
// leader reports need or more, asking it at once if it has not heard from
// it yet (a node just started). A new leader's own RequireFormat then
// decides with every member's format. The refusal names every member this
// node sees behind.
func (g *VersionGate) requireLeader(need fsm.Format) error {
	if need <= fsm.OldestFormat || g.node.leading() {
		return nil
	}
	id, addr := g.node.leader()
	if id == "" {
		return nil // no leader: the forward fails as not counted
	}
	pf, ok := g.readings.get(id)
	if !ok && addr != "" {
		if rd, res := g.node.readMember(addr, id); res == readProven {
			g.readings.record(rd)
			pf, ok = peerFormat{version: rd.Version, format: rd.Format}, true
		}
	}
	if ok && pf.format >= need {
		return nil
	}
	err := g.RequireFormat(need)
	if err == nil {
		err = &UpgradingError{Need: need, Effective: fsm.OldestFormat, Behind: []string{id}}
	}
	return err
}

// MemberFormat is one server's release and log format as this node last
// heard them (with its clock reading, at most clockReadingTTL ago);
// Format 0 means unknown: not heard from, a release that does not
// report it, or an answer that did not prove it is the member's
// (clockproof.go), and counts as fsm.OldestFormat.
type MemberFormat struct {
	ID      string     `json:"id"`
	Version string     `json:"version,omitempty"`
	Format  fsm.Format `json:"format"`
}

// MemberFormats is the cluster's effective format, the lowest any server
// of the configuration supports (a server whose format is unknown counts
// as fsm.OldestFormat), and each server's release and format as this
// node knows them. Non-voters count too: they apply the same log. With
// the configuration unreadable it is fsm.OldestFormat.
func (g *VersionGate) MemberFormats() (fsm.Format, []MemberFormat) {
	servers, ok := g.node.servers()
	if !ok {
		return fsm.OldestFormat, []MemberFormat{{ID: "(configuration unknown)"}}
	}
	if len(servers) == 0 {
		// In no cluster yet: nothing is known, and nothing may be
		// recorded in the data dir it will join with.
		return fsm.OldestFormat, nil
	}
	eff := g.own
	var members []MemberFormat
	for _, s := range servers {
		m := MemberFormat{ID: string(s.ID)}
		if m.ID == g.self {
			m.Version, m.Format = g.version, g.own
		} else if pf, ok := g.readings.get(m.ID); ok {
			m.Version, m.Format = pf.version, pf.format
		}
		members = append(members, m)
		eff = min(eff, max(m.Format, fsm.OldestFormat))
	}
	return eff, members
}

// ClusterFormat is the cluster's format as this gate sees it: the
// effective format, or the one the data dir recorded once every member
// reported it (never lowered).
func (g *VersionGate) ClusterFormat() fsm.Format {
	f, _ := g.MemberFormats()
	return max(f, fsm.Format(g.mark.Load()))
}

// raise records in the data dir that it may hold entries of format f
// (never lowering it); on a node that started with state (an upgraded
// one) the raise is logged once.
func (g *VersionGate) raise(f fsm.Format) error {
	if f <= fsm.Format(g.mark.Load()) {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if f <= fsm.Format(g.mark.Load()) {
		return nil
	}
	if err := g.node.recordFormat(f); err != nil {
		return fmt.Errorf("record log format %d in the data dir: %w", f, err)
	}
	g.mark.Store(uint32(f))
	if g.node.upgraded() {
		g.log.Info("every member runs a release that applies this log format: features that need it are open", "format", f)
	}
	return nil
}

// noteCluster raises the data dir's format once every member reports a
// newer one (the clock check's goroutine, after each round of
// readings), so followers record it too, not only a leader that lets a
// gated write through.
func (g *VersionGate) noteCluster() {
	eff, _ := g.MemberFormats()
	if err := g.raise(eff); err != nil {
		g.log.Warn("version gate", "error", err)
	}
}

// checkJoiner refuses a server that cannot apply the log it would
// receive: once the data dir records a format past the oldest (every
// member ran it, so entries of it may be in the log), a joining server
// that answers on its clock endpoint must prove a reading of at least
// that format (a release before formats reports none, one before proven
// readings proves none: old). A server that cannot be reached yet is let
// in, as `rlnode join` of a server not started yet always was: it joins
// as a non-voter, and counts as old for the gate until it reports.
func (g *VersionGate) checkJoiner(j JoinRequest) error {
	mark := fsm.Format(g.mark.Load())
	if mark <= fsm.OldestFormat || j.HTTPAddr == "" {
		return nil
	}
	rd, res := g.node.readMember(j.HTTPAddr, j.ID)
	switch res {
	case readUnreached:
		g.log.Warn("joining server not reachable at its HTTP address: its log format is unknown until it answers", "id", j.ID, "http_addr", j.HTTPAddr)
		return nil
	case readUnproven:
		// Something answered without proving it is the joiner (a release
		// before proven readings wants the bearer): its format is
		// unknown, which is too old for this log.
		rd = ClockReading{ID: j.ID}
	}
	g.readings.record(rd)
	if have := max(rd.Format, fsm.OldestFormat); have < mark {
		return &JoinFormatError{ID: j.ID, Version: rd.Version, Have: have, Need: mark}
	}
	return nil
}

// VersionGate is the node's version gate.
func (n *Node) VersionGate() *VersionGate { return n.gate }

// RequireFormat is the version gate's (VersionGate.RequireFormat), for
// the features that reach it through the node.
func (n *Node) RequireFormat(need fsm.Format) error { return n.gate.RequireFormat(need) }

// checkJoinerFormat is the gate's check of a joining server (join).
func (n *Node) checkJoinerFormat(j JoinRequest) error { return n.gate.checkJoiner(j) }

// nodeGate is the node as its version gate sees it.
type nodeGate struct{ n *Node }

func (a nodeGate) servers() ([]raft.Server, bool) { return nodeClockPeers{n: a.n}.servers() }
func (a nodeGate) leading() bool                  { return a.n.IsLeader() }
func (a nodeGate) leader() (string, string)       { return a.n.Leader() }
func (a nodeGate) upgraded() bool                 { return a.n.hadState }
func (a nodeGate) recordFormat(f fsm.Format) error {
	return storage.RaiseFormat(a.n.cfg.DataDir, f, a.n.cfg.Version)
}
func (a nodeGate) readMember(addr, id string) (ClockReading, readResult) {
	rd, _, res := a.n.clockCheck.peers.readClock(addr, id)
	return rd, res
}

// JoinFormatError refuses a join: the server runs a release older than
// the log format the cluster may already hold. It is ErrConflict (409).
type JoinFormatError struct {
	ID      string
	Version string // "" for a release before versions were reported
	Have    fsm.Format
	Need    fsm.Format
}

func (e *JoinFormatError) Error() string {
	rel := ""
	if e.Version != "" {
		rel = " (rlnode " + e.Version + ")"
	}
	return fmt.Sprintf("join %s: %v: the cluster's log may hold format %d entries and %s runs log format %d%s; upgrade it before it joins (docs/upgrading.md)",
		e.ID, ErrConflict, e.Need, e.ID, e.Have, rel)
}

func (e *JoinFormatError) Unwrap() error { return ErrConflict }

// peerFormats are the releases and formats peers reported with their
// clock readings (clockcheck.go). A reading older than clockReadingTTL is
// forgotten: a server not heard from counts as old.
type peerFormats struct {
	now  func() time.Time
	mu   sync.Mutex
	seen map[string]peerFormat
}

type peerFormat struct {
	version string
	format  fsm.Format
	at      time.Time
}

func newPeerFormats(now func() time.Time) *peerFormats {
	return &peerFormats{now: now, seen: map[string]peerFormat{}}
}

// record keeps what a reading said (a reading without a format, from an
// older release, records it as unknown).
func (p *peerFormats) record(rd ClockReading) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen[rd.ID] = peerFormat{version: rd.Version, format: rd.Format, at: p.now()}
}

// get is id's last report if recent.
func (p *peerFormats) get(id string) (peerFormat, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pf, ok := p.seen[id]
	if !ok || p.now().Sub(pf.at) > clockReadingTTL {
		return peerFormat{}, false
	}
	return pf, true
}
