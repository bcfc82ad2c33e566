package cluster

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
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
// catching up is to ask again, not to stop. Nor is a configuration older
// than the node's own join (issue 41): the snapshot a joining node
// installs may name its old self, or not even its leader.
//
// removal is a type of its own over one narrow interface
// (configurationSource, what it reads of raft) and the logger; the node
// owns its watch goroutine and sends the leader's notice (tellRemoved in
// membership.go). It is unit-tested without a cluster.

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
	self    string
	dataDir string // where the join record lives ("" keeps it in memory)
	log     hclog.Logger

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

func newRemoval(self, dataDir string, log hclog.Logger) *removal {
	return &removal{self: self, dataDir: dataDir, log: log}
}

// configurationSource is what removal's watch reads of raft.
type configurationSource interface {
	// lastIndex is the log's last index; read before the configuration,
	// it is a bound the configuration is at least as new as.
	lastIndex() uint64
	// configuration is the latest configuration.
	configuration() ([]raft.Server, error)
	// shutDown says raft has shut down.
	shutDown() bool
}

// Removed says whether this node was removed from the cluster, and why.
func (r *removal) Removed() (reason string, removed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reason, r.removed
}

// isRemoved is Removed without the reason, for the hit path.
func (r *removal) isRemoved() bool {
	_, removed := r.Removed()
	return removed
}

// membership is MemberJoining, MemberActive or MemberRemoved.
func (r *removal) membership() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.removed:
		return MemberRemoved
	case r.inConfig:
		return MemberActive
	}
	return MemberJoining
}

// notMember is the error a removed node answers with.
func (r *removal) notMember() error {
	reason, _ := r.Removed()
	return fmt.Errorf("%w: %s", ErrNotMember, reason)
}

// wasInCluster records that this node was a voter (it found Raft state
// at start): a configuration without it is a removal.
func (r *removal) wasInCluster() {
	r.mu.Lock()
	r.wasVoter = true
	r.mu.Unlock()
}

// leave records that this node asked for its own removal.
func (r *removal) leave() {
	r.mu.Lock()
	r.leaving = true
	r.mu.Unlock()
}

// mark records the removal (the first reason wins) and logs it once with
// what the operator can do.
func (r *removal) mark(reason string, index uint64) {
	r.mu.Lock()
	if r.removed {
		r.index = max(r.index, index)
		r.mu.Unlock()
		return
	}
	r.removed = true
	r.reason, r.index = reason, index
	leaving := r.leaving
	r.mu.Unlock()
	if leaving {
		r.log.Info("this node left the cluster as it asked", "reason", reason, "id", r.self)
		return
	}
	r.log.Error("this node was removed from the cluster: it answers not_member (503) and is not ready; stop it, or add it back with rlnode join (or restart it with --join: it asks the leader and rejoins empty)",
		"reason", reason, "id", r.self)
}

// observe updates the removal state from the latest configuration this
// node has, its log reaching index (raft v1.7 reports no configuration
// index, hence the log's).
func (r *removal) observe(servers []raft.Server, index uint64) {
	in, voter := false, false
	for _, s := range servers {
		if s.ID == raft.ServerID(r.self) {
			in, voter = true, s.Suffrage == raft.Voter
		}
	}
	r.mu.Lock()
	if index < r.joinIndex || r.awaitingJoin {
		// The log has not reached this node's join: the configuration
		// predates it and says nothing of this incarnation. The node
		// is catching up.
		r.inConfig = false
		r.mu.Unlock()
		return
	}
	r.inConfig = in
	r.wasVoter = r.wasVoter || voter
	switch {
	case in && r.removed && index > r.index:
		r.removed, r.reason = false, ""
		r.mu.Unlock()
		r.log.Info("this node is a member of the cluster again", "id", r.self, "last_index", index)
		return
	case !in && len(servers) > 0 && r.wasVoter && !r.removed:
		r.mu.Unlock()
		r.mark("its latest configuration no longer names it", index)
		return
	}
	r.mu.Unlock()
}

// watch reads src's configuration every interval until stop closes. A
// leader that removes itself shuts its raft down (ShutdownOnRemove).
func (r *removal) watch(src configurationSource, stop <-chan struct{}, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		last := src.lastIndex()
		servers, err := src.configuration()
		if err == nil && !src.shutDown() {
			r.observe(servers, last)
		} else if src.shutDown() && !r.isRemoved() {
			select {
			case <-stop:
				return
			default:
				r.mark("it removed itself while leading", 0)
			}
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

// refusedBy records a leader's refusal naming this node a non-member
// (mutual TLS: its certificate names a server the leader's configuration
// no longer has), this node's log reaching lastIndex.
func (r *removal) refusedBy(leader string, lastIndex uint64) {
	r.mark("the leader "+leader+" refuses it as a non-member", lastIndex)
}

// removedNotice is RemovedPath's body: the leader tells a server it just
// removed.
type removedNotice struct {
	ID     string `json:"id"`
	Leader string `json:"leader"`
	// Index is the log index of the configuration entry that removed it.
	Index uint64 `json:"index"`
}

// serveNotice is RemovedPath: a leader says it removed this node.
func (r *removal) serveNotice(w http.ResponseWriter, req *http.Request) {
	var in removedNotice
	if err := json.NewDecoder(http.MaxBytesReader(w, req.Body, 4<<10)).Decode(&in); err != nil {
		writeError(w, r.self, fmt.Errorf("%w: removed notice: %w", errMalformed, err))
		return
	}
	if in.ID != r.self {
		writeError(w, r.self, fmt.Errorf("%w: removed notice for %q reached %q", errMalformed, in.ID, r.self))
		return
	}
	r.mark("the leader "+in.Leader+" removed it", in.Index)
	w.Header().Set(HeaderServedBy, r.self)
	w.WriteHeader(http.StatusNoContent)
}

// joinRecord is storage.JoinFile's content.
type joinRecord struct {
	Index uint64 `json:"index"`
}

// askingToJoin marks this node as waiting for the answer to its join.
func (r *removal) askingToJoin() {
	r.mu.Lock()
	r.awaitingJoin = true
	r.mu.Unlock()
}

// joinedAt records that the cluster accepted this node's join at the
// leader's last index (0: a release that does not say; nothing known),
// in memory and in the data dir, so a restart still knows which
// configurations predate it.
func (r *removal) joinedAt(index uint64) {
	r.mu.Lock()
	r.awaitingJoin = false
	if index <= r.joinIndex {
		r.mu.Unlock()
		return
	}
	r.joinIndex = index
	r.mu.Unlock()
	if r.dataDir == "" {
		return
	}
	b, _ := json.Marshal(joinRecord{Index: index})
	path := filepath.Join(r.dataDir, storage.JoinFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil || os.Rename(tmp, path) != nil {
		r.log.Warn("could not record the join index; after a restart this node may read an older configuration as a removal", "index", index, "error", err)
	}
}

// loadJoinIndex reads storage.JoinFile (absent: nothing known).
func (r *removal) loadJoinIndex() {
	if r.dataDir == "" {
		return
	}
	b, err := boundedfile.Read(filepath.Join(r.dataDir, storage.JoinFile), storage.MaxMetaFileBytes)
	if err != nil {
		return
	}
	var rec joinRecord
	if json.Unmarshal(b, &rec) == nil {
		r.mu.Lock()
		r.joinIndex = rec.Index
		r.mu.Unlock()
	}
}

// raftMembership is configurationSource over the node's raft.
type raftMembership struct{ r *raft.Raft }

func (m raftMembership) lastIndex() uint64 { return m.r.LastIndex() }
func (m raftMembership) shutDown() bool    { return m.r.State() == raft.Shutdown }
func (m raftMembership) configuration() ([]raft.Server, error) {
	cf := m.r.GetConfiguration()
	if err := cf.Error(); err != nil {
		return nil, err
	}
	return cf.Configuration().Servers, nil
}

// The node's side: what the public API asks of it, and the node as the
// forwarder sees it (localNode).

// Removed says whether this node was removed from the cluster, and why.
func (n *Node) Removed() (reason string, removed bool) { return n.removal.Removed() }

// nodeForward is the node as its forwarder sees it: the removal's answers
// with the node's own.
type nodeForward struct{ *Node }

func (n nodeForward) isRemoved() bool  { return n.removal.isRemoved() }
func (n nodeForward) notMember() error { return n.removal.notMember() }
func (n nodeForward) refusedAsNonMember(leader string) {
	n.removal.refusedBy(leader, n.raft.LastIndex())
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
