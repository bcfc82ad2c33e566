package cluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/fsm"
)

// Safe joins. A server that asks to become a voter is first added as a
// non-voter: it receives the log but does not count towards quorum, so a
// server that never comes up (or is slow to copy a snapshot) cannot take
// the cluster's majority with it. The leader's promoter makes it a voter
// once its log holds everything the leader had committed when it was
// staged (or at the previous check), and removes it if that does not
// happen within JoinCatchupTimeout.

const (
	promoteInterval = 250 * time.Millisecond
	// maxPromoteLag is how far behind the commit index a caught-up server
	// may still be when it is promoted (entries in flight under load).
	maxPromoteLag = 1024
)

// staged is one non-voter waiting to become a voter.
type staged struct {
	since  time.Time
	target uint64 // the commit index it must have applied
}

// promoter holds the leader's staged joins. It is only used by the
// promoter goroutine and by Join on the leader.
type promoter struct {
	mu     sync.Mutex
	staged map[string]*staged
}

func (p *promoter) stage(id string, target uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.staged == nil {
		p.staged = map[string]*staged{}
	}
	if _, ok := p.staged[id]; !ok {
		p.staged[id] = &staged{since: time.Now(), target: target}
	}
}

func (p *promoter) snapshot() map[string]staged {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]staged, len(p.staged))
	for id, s := range p.staged {
		out[id] = *s
	}
	return out
}

func (p *promoter) done(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.staged, id)
}

func (p *promoter) retarget(id string, target uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.staged[id]; ok {
		s.target = target
	}
}

func (p *promoter) clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.staged = nil
}

// runPromoter is a leader routine (watchLeadership starts it on gaining
// leadership and stops it on losing it).
func (n *Node) runPromoter(ctx context.Context) {
	// A new leader learns of pending joins from the joining servers,
	// which ask again until they are voters.
	defer n.promoter.clear()
	t := time.NewTicker(promoteInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for id, s := range n.promoter.snapshot() {
			n.promoteOne(id, s)
		}
	}
}

func (n *Node) promoteOne(id string, s staged) {
	cf := n.raft.GetConfiguration()
	if cf.Error() != nil {
		return
	}
	var srv *raft.Server
	for _, x := range cf.Configuration().Servers {
		if x.ID == raft.ServerID(id) {
			srv = &x
		}
	}
	if srv == nil || srv.Suffrage == raft.Voter {
		n.promoter.done(id)
		return
	}
	applied, err := n.peerApplied(id)
	commit := n.raft.CommitIndex()
	switch s.next(applied, err, commit, time.Now(), n.cfg.JoinCatchupTimeout) {
	case keepWaiting:
	case chase:
		n.promoter.retarget(id, commit)
	case promote:
		if err := n.raft.AddVoter(srv.ID, srv.Address, 0, n.cfg.ApplyTimeout).Error(); err != nil {
			n.log.Warn("promote caught-up server", "id", id, "error", err)
			return
		}
		n.promoter.done(id)
		n.log.Info("server caught up; promoted to voter", "id", id, "applied", applied, "after", time.Since(s.since).Round(time.Millisecond))
	case giveUp:
		n.log.Warn("joining server did not catch up in time; removing it", "id", id, "timeout", n.cfg.JoinCatchupTimeout, "applied", applied, "want", s.target, "last_error", err)
		if err := n.raft.RemoveServer(srv.ID, 0, n.cfg.ApplyTimeout).Error(); err != nil {
			n.log.Warn("remove server that did not catch up", "id", id, "error", err)
			return
		}
		if _, ok := n.fsm.Node(id); ok {
			n.apply(fsm.EncodeRemoveNode(id), n.cfg.ApplyTimeout)
		}
		n.promoter.done(id)
	}
}

// promoteStep is what the promoter does next with a staged server.
type promoteStep int

const (
	keepWaiting promoteStep = iota
	// chase: it reached its target but the cluster ran far ahead
	// meanwhile: aim at the commit index once more.
	chase
	promote
	// giveUp: it did not catch up within the join timeout: remove it.
	giveUp
)

// next decides a staged server's fate from how far its log reaches
// (applied, or err when it could not be asked), the leader's commit index
// and the time.
func (s staged) next(applied uint64, err error, commit uint64, now time.Time, timeout time.Duration) promoteStep {
	switch {
	case err == nil && applied >= s.target && commit > applied+maxPromoteLag:
		return chase
	case err == nil && applied >= s.target:
		return promote
	case now.Sub(s.since) > timeout:
		return giveUp
	}
	return keepWaiting
}

// peerApplied asks a server how far its log reaches (ProgressPath).
func (n *Node) peerApplied(id string) (uint64, error) {
	meta, ok := n.fsm.Node(id)
	if !ok || meta.HTTPAddr == "" {
		return 0, fmt.Errorf("no HTTP address known for %s", id)
	}
	var p Progress
	if err := n.proven.getJSON(context.Background(), BaseURL(meta.HTTPAddr)+ProgressPath, &p); err != nil {
		return 0, err
	}
	if p.ID != id {
		return 0, fmt.Errorf("%s answers as %q", meta.HTTPAddr, p.ID)
	}
	// The last log index, not the state machine's applied index: the
	// newest entries are often configuration changes, which the state
	// machine never sees.
	return p.LastLogIndex, nil
}

// suffrage returns this node's suffrage in its latest configuration and
// whether it is in it at all.
func (n *Node) suffrage() (raft.ServerSuffrage, bool) {
	cf := n.raft.GetConfiguration()
	if cf.Error() != nil {
		return 0, false
	}
	for _, s := range cf.Configuration().Servers {
		if s.ID == raft.ServerID(n.cfg.ID) {
			return s.Suffrage, true
		}
	}
	return 0, false
}

// JoinAndWait asks the members at addrs to add this node and waits until it
// is a voter (or, for a non-voter request, a member), asking again now and
// then: a leader change forgets a staged join, and a join that did not
// catch up in time was removed. A node an operator removed meanwhile
// stops asking (an error wrapping ErrNotMember): a removal wins.
func (n *Node) JoinAndWait(ctx context.Context, addrs []string, self JoinRequest, log func(msg string, args ...any)) error {
	if !n.hasRaftState() && !n.boot.claimedVoter() {
		n.setWaiting("asking " + strings.Join(addrs, ", ") + " to add this node")
	}
	for first := true; ; first = false {
		if n.removal.isRemoved() {
			// An operator removed it while its join was retried: the
			// removal wins; only an operator adds it back.
			return fmt.Errorf("join: not asking again: %w", n.removal.notMember())
		}
		// A node with no Raft state cannot be a voter of this
		// incarnation (promotion needs its log), so a voter of its id is
		// an old incarnation that lost its data: replace it. Except a
		// member of the bootstrap claim it accepted: it is a voter of the
		// cluster's first configuration, not yet reached by the leader;
		// replacing it would leave the new cluster with one voter.
		self.Rejoin = (first && self.Rejoin) || (!n.hasRaftState() && !n.boot.claimedVoter())
		if first && !n.hasRaftState() {
			n.removal.askingToJoin()
		}
		res, err := joinCluster(ctx, addrs, self, n.cfg.ClusterToken, n.cfg.TLS, log)
		if err != nil {
			return err
		}
		n.removal.joinedAt(res.Index)
		deadline := time.After(5 * time.Second)
		for waiting := true; waiting; {
			if s, ok := n.suffrage(); ok && (s == raft.Voter || !self.voter()) && !n.removal.isRemoved() {
				return nil
			}
			if n.removal.isRemoved() {
				return fmt.Errorf("join: not asking again: %w", n.removal.notMember())
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("wait to become a voter: %w", ctx.Err())
			case <-deadline:
				log("not a voter yet; asking again", "id", self.ID)
				waiting = false
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}
