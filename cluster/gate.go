package cluster

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

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

// RequireFormat returns nil when every voter can apply entries of format
// need, else an *UpgradingError. Call it on the leader, before the log,
// for any write that needs more than fsm.OldestFormat. Before it lets
// such a write through it records the format in the data dir
// (storage.RaiseFormat), so a build too old for what follows refuses
// this dir instead of halting on it; from then on the format stays open
// on this node.
func (n *Node) RequireFormat(need fsm.Format) error {
	if need <= fsm.OldestFormat || need <= fsm.Format(n.formatMark.Load()) {
		// Once every member reported it, the format is never lowered
		// (CockroachDB's cluster version): entries of it may be in the
		// log already, so a member that goes silent since changes
		// nothing, and an older one may not join (checkJoinerFormat).
		return nil
	}
	eff, members := n.effectiveFormat()
	if need <= eff {
		return n.raiseFormat(eff)
	}
	var behind []string
	for _, m := range members {
		if m.Format < need {
			behind = append(behind, m.ID)
		}
	}
	return &UpgradingError{Need: need, Effective: eff, Behind: behind}
}

// requireLeaderFormat is the gate on the node asked, before it forwards a
// write that needs format need: a leader of an older release has no gate
// (and may not know the operation), so a follower refuses unless the
// leader reports need or more, asking it at once if it has not heard from
// it yet (a node just started). A new leader's own RequireFormat then
// decides with every member's format. The refusal names every member this
// node sees behind.
func (n *Node) requireLeaderFormat(need fsm.Format) error {
	if need <= fsm.OldestFormat || n.IsLeader() {
		return nil
	}
	id, addr := n.Leader()
	if id == "" {
		return nil // no leader: the forward fails as not counted
	}
	pf, ok := n.formats.get(id)
	if !ok && addr != "" {
		if rd, _, res := n.clockCheck.peers.readClock(addr, id); res == readProven {
			n.formats.record(rd)
			pf, ok = peerFormat{version: rd.Version, format: rd.Format}, true
		}
	}
	if ok && pf.format >= need {
		return nil
	}
	err := n.RequireFormat(need)
	if err == nil {
		err = &UpgradingError{Need: need, Effective: fsm.OldestFormat, Behind: []string{id}}
	}
	return err
}

// MemberFormat is one server's release and log format as this node last
// heard them (with its clock reading, at most clockReadingTTL ago);
// Format 0 means unknown: not heard from, or a release that does not
// report it, and counts as fsm.OldestFormat.
type MemberFormat struct {
	ID      string     `json:"id"`
	Version string     `json:"version,omitempty"`
	Format  fsm.Format `json:"format"`
}

// format is the log format this node applies and reports.
func (n *Node) format() fsm.Format {
	if n.cfg.Format != 0 {
		return n.cfg.Format
	}
	return fsm.CurrentFormat
}

// effectiveFormat is the lowest format any server of the configuration
// supports (a server whose format is unknown counts as
// fsm.OldestFormat), and each server's. Non-voters count too: they apply
// the same log. With the configuration unreadable it is
// fsm.OldestFormat.
func (n *Node) effectiveFormat() (fsm.Format, []MemberFormat) {
	cf := n.raft.GetConfiguration()
	if cf.Error() != nil {
		return fsm.OldestFormat, []MemberFormat{{ID: "(configuration unknown)"}}
	}
	servers := cf.Configuration().Servers
	if len(servers) == 0 {
		// In no cluster yet: nothing is known, and nothing may be
		// recorded in the data dir it will join with.
		return fsm.OldestFormat, nil
	}
	eff := n.format()
	var members []MemberFormat
	for _, s := range servers {
		m := MemberFormat{ID: string(s.ID)}
		if m.ID == n.cfg.ID {
			m.Version, m.Format = n.cfg.Version, n.format()
		} else if pf, ok := n.formats.get(m.ID); ok {
			m.Version, m.Format = pf.version, pf.format
		}
		members = append(members, m)
		eff = min(eff, max(m.Format, fsm.OldestFormat))
	}
	return eff, members
}

// MemberFormats is every server's release and format as this node knows
// them, and the cluster's effective format (the version gate's view).
func (n *Node) MemberFormats() (fsm.Format, []MemberFormat) { return n.effectiveFormat() }

// raiseFormat records in the data dir that it may hold entries of format
// f (never lowering it); on a node that started with state (an upgraded
// one) the raise is logged once.
func (n *Node) raiseFormat(f fsm.Format) error {
	if f <= fsm.Format(n.formatMark.Load()) {
		return nil
	}
	n.formatMu.Lock()
	defer n.formatMu.Unlock()
	if f <= fsm.Format(n.formatMark.Load()) {
		return nil
	}
	if err := storage.RaiseFormat(n.cfg.DataDir, f, n.cfg.Version); err != nil {
		return fmt.Errorf("record log format %d in the data dir: %w", f, err)
	}
	n.formatMark.Store(uint32(f))
	if n.hadState {
		// News only on an upgrade: a new cluster starts at its format.
		n.log.Info("every member runs a release that applies this log format: features that need it are open", "format", f)
	}
	return nil
}

// noteClusterFormat raises the data dir's format once every member
// reports a newer one (the clock check's goroutine, after each round of
// readings), so followers record it too, not only a leader that lets a
// gated write through.
func (n *Node) noteClusterFormat() {
	eff, _ := n.effectiveFormat()
	if err := n.raiseFormat(eff); err != nil {
		n.log.Warn("version gate", "error", err)
	}
}

// checkJoinerFormat refuses a server that cannot apply the log it would
// receive: once this node's data dir records a format past the oldest
// (every member ran it, so entries of it may be in the log), a joining
// server that answers on its clock endpoint must report at least that
// format (a release before formats reports none: old). A server that
// cannot be asked yet is let in, as `rlnode join` of a server not started
// yet always was: it joins as a non-voter, and counts as old for the gate
// until it reports.
func (n *Node) checkJoinerFormat(j JoinRequest) error {
	mark := fsm.Format(n.formatMark.Load())
	if mark <= fsm.OldestFormat || j.HTTPAddr == "" {
		return nil
	}
	rd, _, res := n.clockCheck.peers.readClock(j.HTTPAddr, j.ID)
	switch res {
	case readUnreached:
		n.log.Warn("joining server not reachable at its HTTP address: its log format is unknown until it answers", "id", j.ID, "http_addr", j.HTTPAddr)
		return nil
	case readUnproven:
		// Something answered without proving it is the joiner (a release
		// before proven readings wants the bearer): its format is unknown,
		// which is too old for this log.
		rd = ClockReading{ID: j.ID}
	}
	n.formats.record(rd)
	if have := max(rd.Format, fsm.OldestFormat); have < mark {
		return &JoinFormatError{ID: j.ID, Version: rd.Version, Have: have, Need: mark}
	}
	return nil
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
