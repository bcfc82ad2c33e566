package cluster

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/cluster/storage"
	"github.com/rlnode/rlnode/internal/boundedfile"
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
	// joinIndex is the leader's last log index once it had accepted this
	// node's latest join (JoinResult, kept in storage.JoinFile): until
	// this node's log reaches it, its configuration predates the join (a
	// snapshot older than the join names its old self, or not even its
	// leader), so it neither makes this node a member nor removes it.
	joinIndex uint64
	// awaitingJoin: this node asked to join and has no answer yet; the
	// leader may already be sending it configurations older than the
	// join (the snapshot it installs), which say nothing of it yet.
	awaitingJoin bool
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
// configuration this node has, its log reaching index (raft v1.7 reports
// no configuration index, hence the log's).
func (n *Node) observeConfiguration(servers []raft.Server, index uint64) {
	n.removal.mu.Lock()
	if index < n.removal.joinIndex || n.removal.awaitingJoin {
		// The log has not reached this node's join: the configuration
		// predates it and says nothing of this incarnation (the
		// snapshot it installed may name its old self, or not even its
		// leader). The node is catching up.
		n.removal.inConfig = false
		n.removal.mu.Unlock()
		return
	}
	n.removal.mu.Unlock()
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
		// The log's last index first: raft updates the configuration
		// before the last index, so the configuration read next is at
		// least as new as the log up to it.
		last := n.raft.LastIndex()
		cf := n.raft.GetConfiguration()
		if err := cf.Error(); err == nil && n.raft.State() != raft.Shutdown {
			n.observeConfiguration(cf.Configuration().Servers, last)
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

// joinRecord is storage.JoinFile's content.
type joinRecord struct {
	Index uint64 `json:"index"`
}

// joinedAt records that the cluster accepted this node's join at
// configuration index (0: a release that does not say; nothing known),
// in memory and in the data dir, so a restart still knows which
// configurations predate it.
func (n *Node) joinedAt(index uint64) {
	n.removal.mu.Lock()
	n.removal.awaitingJoin = false
	if index <= n.removal.joinIndex {
		n.removal.mu.Unlock()
		return
	}
	n.removal.joinIndex = index
	n.removal.awaitingJoin = false
	n.removal.mu.Unlock()
	b, _ := json.Marshal(joinRecord{Index: index})
	path := filepath.Join(n.cfg.DataDir, storage.JoinFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil || os.Rename(tmp, path) != nil {
		n.log.Warn("could not record the join index; after a restart this node may read an older configuration as a removal", "index", index, "error", err)
	}
}

// askingToJoin marks this node as waiting for the answer to its join.
func (n *Node) askingToJoin() {
	n.removal.mu.Lock()
	n.removal.awaitingJoin = true
	n.removal.mu.Unlock()
}

// loadJoinIndex reads storage.JoinFile (absent: nothing known).
func (n *Node) loadJoinIndex() {
	b, err := boundedfile.Read(filepath.Join(n.cfg.DataDir, storage.JoinFile), storage.MaxMetaFileBytes)
	if err != nil {
		return
	}
	var rec joinRecord
	if json.Unmarshal(b, &rec) == nil {
		n.removal.mu.Lock()
		n.removal.joinIndex = rec.Index
		n.removal.mu.Unlock()
	}
}
