package cluster

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// A removed node must know it: it can decide nothing (it is in no
// configuration the leader replicates to), so it answers not_member at
// once instead of forwarding, fails readiness, and never asks to join
// again by itself. It learns it three ways, whichever comes first: the
// leader that removed it tells it (RemovedPath, best effort), the latest
// configuration it has no longer names it, or the leader refuses it as a
// non-member (mutual TLS). From the configuration, "removed" needs "was a
// voter" first (or Raft state at start): a node catching up from the
// start of the log sees configurations without itself, a node waiting to
// be added has none, and a joining non-voter the promoter dropped for not
// catching up is to ask again, not to stop.

// Membership states (Status.Membership, the rlnode_member metric).
const (
	MemberJoining = "joining" // not in any configuration this node has seen yet
	MemberActive  = "member"
	MemberRemoved = "removed"
)

// membershipCheckInterval is how often the node reads its configuration:
// readiness turns within it after the removal reached this node.
const membershipCheckInterval = 100 * time.Millisecond

// removal is what this node knows about its own membership.
type removal struct {
	mu sync.Mutex
	// wasVoter: a configuration without this node is now a removal.
	wasVoter bool
	// inConfig: the latest configuration seen names this node.
	inConfig bool
	removed  bool
	reason   string
	// index is the log index of the removal (or this node's last index
	// when it learned it): the leader stops replicating to a server it
	// removed once it has sent that entry, so a configuration naming this
	// node again together with entries past index means it was added
	// back (an operator's rlnode join). raft (v1.7) reports no index with
	// a configuration, hence the log's.
	index uint64
	// leaving: this node asked for its own removal (Leave), so being
	// removed is news to no one.
	leaving bool
}

// Removed says whether this node was removed from the cluster, and why.
func (n *Node) Removed() (reason string, removed bool) {
	n.removal.mu.Lock()
	defer n.removal.mu.Unlock()
	return n.removal.reason, n.removal.removed
}

// isRemoved is Removed without the reason, for the hit path.
func (n *Node) isRemoved() bool {
	_, r := n.Removed()
	return r
}

// membership is MemberJoining, MemberActive or MemberRemoved.
func (n *Node) membership() string {
	n.removal.mu.Lock()
	defer n.removal.mu.Unlock()
	switch {
	case n.removal.removed:
		return MemberRemoved
	case n.removal.inConfig:
		return MemberActive
	}
	return MemberJoining
}

// notMember is the error a removed node answers with.
func (n *Node) notMember() error {
	reason, _ := n.Removed()
	return fmt.Errorf("%w: %s", ErrNotMember, reason)
}

// wasInCluster records that this node was a voter (it found Raft state
// at start): a configuration without it is a removal.
func (n *Node) wasInCluster() {
	n.removal.mu.Lock()
	n.removal.wasVoter = true
	n.removal.mu.Unlock()
}

// markRemoved records the removal (the first reason wins) and logs it
// once with what the operator can do.
func (n *Node) markRemoved(reason string, index uint64) {
	n.removal.mu.Lock()
	if n.removal.removed {
		n.removal.index = max(n.removal.index, index)
		n.removal.mu.Unlock()
		return
	}
	n.removal.removed = true
	n.removal.reason, n.removal.index = reason, index
	leaving := n.removal.leaving
	n.removal.mu.Unlock()
	if leaving {
		n.log.Info("this node left the cluster as it asked", "reason", reason, "id", n.cfg.ID)
		return
	}
	n.log.Error("this node was removed from the cluster: it answers not_member (503) and is not ready; stop it, or add it back with rlnode join (or restart it with an empty data dir and --join)",
		"reason", reason, "id", n.cfg.ID)
}

// observeConfiguration updates the removal state from the latest
// configuration this node has, its log reaching lastIndex.
func (n *Node) observeConfiguration(servers []raft.Server, lastIndex uint64) {
	index := lastIndex
	in, voter := false, false
	for _, s := range servers {
		if s.ID == raft.ServerID(n.cfg.ID) {
			in, voter = true, s.Suffrage == raft.Voter
		}
	}
	n.removal.mu.Lock()
	n.removal.inConfig = in
	n.removal.wasVoter = n.removal.wasVoter || voter
	switch {
	case in && n.removal.removed && index > n.removal.index:
		n.removal.removed, n.removal.reason = false, ""
		n.removal.mu.Unlock()
		n.log.Info("this node is a member of the cluster again", "id", n.cfg.ID, "last_index", index)
		return
	case !in && len(servers) > 0 && n.removal.wasVoter && !n.removal.removed:
		n.removal.mu.Unlock()
		n.markRemoved("its latest configuration no longer names it", index)
		return
	}
	n.removal.mu.Unlock()
}

// watchMembership reads the configuration until the node closes. A
// leader that removes itself shuts its raft down (ShutdownOnRemove).
func (n *Node) watchMembership() {
	defer n.wg.Done()
	t := time.NewTicker(membershipCheckInterval)
	defer t.Stop()
	for {
		cf := n.raft.GetConfiguration()
		if err := cf.Error(); err == nil && n.raft.State() != raft.Shutdown {
			n.observeConfiguration(cf.Configuration().Servers, n.raft.LastIndex())
		} else if n.raft.State() == raft.Shutdown && !n.isRemoved() {
			select {
			case <-n.stop:
				return
			default:
				n.markRemoved("it removed itself while leading", 0)
			}
		}
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
	}
}

// refusedAsNonMember records a leader's refusal naming this node a
// non-member (mutual TLS: its certificate names a server the leader's
// configuration no longer has).
func (n *Node) refusedAsNonMember(leader string) {
	n.markRemoved("the leader "+leader+" refuses it as a non-member", n.raft.LastIndex())
}

// removedNotice is RemovedPath's body: the leader tells a server it just
// removed.
type removedNotice struct {
	ID     string `json:"id"`
	Leader string `json:"leader"`
	// Index is the log index of the configuration entry that removed it.
	Index uint64 `json:"index"`
}

// serveRemoved is RemovedPath: a leader says it removed this node.
func (n *Node) serveRemoved(w http.ResponseWriter, r *http.Request) {
	var in removedNotice
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<10)).Decode(&in); err != nil {
		writeError(w, n.cfg.ID, fmt.Errorf("%w: removed notice: %w", errMalformed, err))
		return
	}
	if in.ID != n.cfg.ID {
		writeError(w, n.cfg.ID, fmt.Errorf("%w: removed notice for %q reached %q", errMalformed, in.ID, n.cfg.ID))
		return
	}
	n.markRemoved("the leader "+in.Leader+" removed it", in.Index)
	w.Header().Set(HeaderServedBy, n.cfg.ID)
	w.WriteHeader(http.StatusNoContent)
}

// tellRemoved tells a removed server so, at httpAddr, so it stops at once
// instead of retrying an earlier join. Best effort: an unreachable or old
// node learns it from its configuration, or from the leader's refusal.
func (n *Node) tellRemoved(id, httpAddr string, index uint64) {
	if httpAddr == "" || id == n.cfg.ID {
		return
	}
	n.closeMu.Lock()
	defer n.closeMu.Unlock()
	if n.closed {
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		ctx, cancel := timeoutOrStop(n.stop, 2*time.Second)
		defer cancel()
		err := n.fwd.peers.postJSON(ctx, BaseURL(httpAddr)+RemovedPath, removedNotice{ID: id, Leader: n.cfg.ID, Index: index}, nil)
		if err != nil {
			n.log.Info("could not tell the removed server it was removed; it will learn it from its configuration", "id", id, "error", err)
		}
	}()
}
