package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/cluster/storage"
	"github.com/rlnode/rlnode/internal/boundedfile"
)

// Symmetric bootstrap (--bootstrap-expect N). Every node starts with the
// same --join list and no node is special:
//
//  1. A node without Raft state asks every listed address who it is
//     (BootstrapInfoPath). If any of them already has Raft state, a cluster
//     exists: the node joins it the ordinary way.
//  2. Once it has met N nodes without state that expect the same N, the
//     node with the lowest id among the N lowest ids is the claimer. It
//     records a claim (claimer and members) in its data dir, asks every
//     other member to accept it (BootstrapClaimPath), and bootstraps with
//     all N as voters only when all have accepted. Everyone else waits to
//     be contacted by the new leader.
//  3. A node accepts one claim only, ever (it is written to its data dir
//     before the answer), and only while it has no Raft state. Two
//     bootstraps would need two fully accepted claims sharing no node, so
//     as long as N is more than half of the listed nodes there is exactly
//     one cluster, whatever the start order, restarts or retries.

// BootstrapMember is one server of a symmetric bootstrap.
type BootstrapMember struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raftAddr"`
	HTTPAddr string `json:"httpAddr"`
}

// BootstrapInfo is what a node says about itself to bootstrapping peers.
type BootstrapInfo struct {
	BootstrapMember
	Expect   int             `json:"expect"`
	HasState bool            `json:"hasState"`
	Claim    *BootstrapClaim `json:"claim,omitempty"`
}

// BootstrapClaim asks the members to form one cluster, bootstrapped by By.
type BootstrapClaim struct {
	By      string            `json:"by"`
	Members []BootstrapMember `json:"members"`
}

func (c BootstrapClaim) same(o BootstrapClaim) bool {
	return c.By == o.By && slices.Equal(c.Members, o.Members)
}

// ErrClaimRefused is returned when a node will not take part in a claim.
var ErrClaimRefused = errors.New("bootstrap claim refused")

// bootstrapper runs the symmetric bootstrap for one node and answers its
// peers' questions (who are you, will you accept this claim). It reaches
// the node through bootstrapNode only, so the claim rules and the claim
// file are tested without a cluster (bootstrap_test.go).
type bootstrapper struct {
	id      string
	expect  int // --bootstrap-expect; 0: this node takes part in none
	dataDir string
	node    bootstrapNode
	log     hclog.Logger
	// mu makes check, read and record of a claim one step.
	mu sync.Mutex
}

// bootstrapNode is the node as the bootstrap needs it.
type bootstrapNode interface {
	// self is this node's id and addresses (the Raft one once the
	// transport is open).
	self() BootstrapMember
	// hasRaftState reports whether the node belongs to a cluster.
	hasRaftState() bool
	// bootstrapCluster bootstraps Raft with servers as its voters.
	bootstrapCluster(servers []raft.Server) error
	// JoinAndWait asks addrs to add this node until it is a voter.
	JoinAndWait(ctx context.Context, addrs []string, self JoinRequest, log func(msg string, args ...any)) error
	// setWaiting says what the node, in no cluster yet, waits for.
	setWaiting(why string)
	// peerClient is a client for the other nodes' internal endpoints.
	peerClient() *peerClient
}

func newBootstrapper(id string, expect int, dataDir string, node bootstrapNode, log hclog.Logger) *bootstrapper {
	return &bootstrapper{id: id, expect: expect, dataDir: dataDir, node: node, log: log}
}

// nodeBootstrap is the node as its bootstrapper sees it.
type nodeBootstrap struct{ n *Node }

func (a nodeBootstrap) self() BootstrapMember {
	return BootstrapMember{ID: a.n.cfg.ID, RaftAddr: string(a.n.transport.LocalAddr()), HTTPAddr: a.n.cfg.HTTPAdvertise}
}
func (a nodeBootstrap) hasRaftState() bool    { return a.n.hasRaftState() }
func (a nodeBootstrap) setWaiting(why string) { a.n.setWaiting(why) }
func (a nodeBootstrap) peerClient() *peerClient {
	return newPeerClient(a.n.cfg.ClusterToken, a.n.cfg.TLS, a.n.cfg.PeerTransport)
}
func (a nodeBootstrap) bootstrapCluster(servers []raft.Server) error {
	return a.n.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
}
func (a nodeBootstrap) JoinAndWait(ctx context.Context, addrs []string, self JoinRequest, log func(msg string, args ...any)) error {
	return a.n.JoinAndWait(ctx, addrs, self, log)
}

// claimedVoter reports whether this node accepted a bootstrap claim that
// names it (same id and Raft address): the claimer bootstrapped the cluster
// with it as a voter, so having no Raft state yet means only that the new
// leader has not reached it, not that it lost its data (the claim would
// have gone with the data dir).
func (b *bootstrapper) claimedVoter() bool {
	c, err := b.readClaim()
	if err != nil || c == nil {
		return false
	}
	self := b.node.self()
	return slices.ContainsFunc(c.Members, func(m BootstrapMember) bool { return m.ID == self.ID && m.RaftAddr == self.RaftAddr })
}

func (b *bootstrapper) readClaim() (*BootstrapClaim, error) {
	path := filepath.Join(b.dataDir, storage.ClaimFile)
	buf, err := boundedfile.Read(path, storage.MaxMetaFileBytes)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, &storage.CorruptError{File: path, Err: err}
	}
	var c BootstrapClaim
	if err := json.Unmarshal(buf, &c); err != nil || c.By == "" {
		return nil, &storage.CorruptError{File: path, Err: fmt.Errorf("not a bootstrap claim: %v", err)}
	}
	return &c, nil
}

// info describes this node to bootstrapping peers (BootstrapInfoPath).
func (b *bootstrapper) info() BootstrapInfo {
	claim, _ := b.readClaim()
	return BootstrapInfo{BootstrapMember: b.node.self(), Expect: b.expect, HasState: b.node.hasRaftState(), Claim: claim}
}

// accept records c as the one claim this node takes part in
// (BootstrapClaimPath). The same claim again is accepted (a claimer's
// retry); any other is refused.
func (b *bootstrapper) accept(c BootstrapClaim) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := checkClaim(c, b.id, b.expect, b.node.hasRaftState()); err != nil {
		return err
	}
	have, err := b.readClaim()
	if err != nil {
		return err
	}
	if have != nil {
		if have.same(c) {
			return nil
		}
		return fmt.Errorf("%w: this node already accepted the claim of %s", ErrClaimRefused, have.By)
	}
	buf, _ := json.Marshal(c)
	path := filepath.Join(b.dataDir, storage.ClaimFile)
	if err := os.WriteFile(path+".tmp", buf, 0o644); err != nil {
		return fmt.Errorf("record claim: %w", err)
	}
	if err := syncRename(path+".tmp", path); err != nil {
		return fmt.Errorf("record claim: %w", err)
	}
	b.log.Info("accepted bootstrap claim", "by", c.By, "members", len(c.Members))
	return nil
}

// checkClaim says why a node (id, expecting expect servers, with or
// without Raft state) must refuse c, whatever it accepted before.
func checkClaim(c BootstrapClaim, id string, expect int, hasState bool) error {
	switch {
	case expect == 0:
		return fmt.Errorf("%w: this node was not started with --bootstrap-expect", ErrClaimRefused)
	case !slices.ContainsFunc(c.Members, func(m BootstrapMember) bool { return m.ID == id }):
		return fmt.Errorf("%w: %s is not among its members", ErrClaimRefused, id)
	case len(c.Members) != expect:
		return fmt.Errorf("%w: it has %d members, this node expects %d", ErrClaimRefused, len(c.Members), expect)
	case hasState:
		return fmt.Errorf("%w: this node already belongs to a cluster", ErrClaimRefused)
	}
	return nil
}

func syncRename(tmp, path string) error {
	f, err := os.Open(tmp)
	if err != nil {
		return err
	}
	err = f.Sync()
	f.Close()
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// run is Node.BootstrapExpect.
func (b *bootstrapper) run(ctx context.Context, addrs []string, log func(msg string, args ...any)) error {
	pc := b.node.peerClient()
	defer pc.close()
	me := b.node.self()
	self := JoinRequest{ID: me.ID, RaftAddr: me.RaftAddr, HTTPAddr: me.HTTPAddr}
	if !b.node.hasRaftState() {
		log("no Raft state: forming a cluster with the nodes in --join", "expect", b.expect)
	}
	lastNote := time.Time{}
	for !b.node.hasRaftState() {
		infos, unreached := b.probe(ctx, pc, addrs)
		if slices.ContainsFunc(infos, func(i BootstrapInfo) bool { return i.HasState }) {
			if b.claimedVoter() {
				break // the claimer bootstrapped us in; its leader will call
			}
			log("a cluster already exists; asking it to add this node")
			b.node.setWaiting("a cluster already exists; asking it to add this node")
			return b.node.JoinAndWait(ctx, addrs, self, log)
		}
		done, note := b.tryClaim(ctx, pc, infos)
		if done {
			break
		}
		if len(unreached) > 0 {
			note += "; not reached yet: " + strings.Join(unreached, ", ")
		}
		b.node.setWaiting(fmt.Sprintf("forming a cluster of %d (--bootstrap-expect): %s", b.expect, note))
		if time.Since(lastNote) > 5*time.Second {
			log("waiting for the cluster to form", "expect", b.expect, "status", note)
			lastNote = time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bootstrap-expect: %w", ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
	// Members other than the claimer learn of the cluster from its leader;
	// an ordinary join records this node's HTTP address.
	if err := b.node.JoinAndWait(ctx, addrs, self, log); err != nil {
		return err
	}
	log("the cluster formed; this node is one of its voters", "voters", b.expect)
	return nil
}

// probe asks every address who it is; the ones that did not answer come
// back as unreached.
func (b *bootstrapper) probe(ctx context.Context, pc *peerClient, addrs []string) (out []BootstrapInfo, unreached []string) {
	for _, a := range addrs {
		var info BootstrapInfo
		if err := pc.getJSON(ctx, BaseURL(a)+BootstrapInfoPath, &info); err != nil {
			unreached = append(unreached, a)
			continue
		}
		if info.ID != b.id && !slices.ContainsFunc(out, func(i BootstrapInfo) bool { return i.ID == info.ID }) {
			out = append(out, info)
		}
	}
	return out, unreached
}

// chooseClaim is the claim self makes from the nodes it met (infos), when
// it is the claimer: the expect lowest ids among itself and the nodes
// without Raft state that expect as many, led by self. Otherwise it says
// why not.
func chooseClaim(self BootstrapMember, expect int, infos []BootstrapInfo) (*BootstrapClaim, string) {
	seen := []BootstrapMember{self}
	for _, i := range infos {
		if i.Expect == expect && !i.HasState {
			seen = append(seen, i.BootstrapMember)
		}
	}
	if len(seen) < expect {
		return nil, fmt.Sprintf("met %d of %d nodes", len(seen), expect)
	}
	slices.SortFunc(seen, func(a, b BootstrapMember) int { return strings.Compare(a.ID, b.ID) })
	members := seen[:expect]
	if members[0].ID != self.ID {
		return nil, fmt.Sprintf("waiting for %s to claim the bootstrap", members[0].ID)
	}
	return &BootstrapClaim{By: self.ID, Members: slices.Clone(members)}, ""
}

// tryClaim makes or renews this node's claim when it is the claimer, and
// bootstraps once every member accepted. It reports whether it did and,
// if not, why.
func (b *bootstrapper) tryClaim(ctx context.Context, pc *peerClient, infos []BootstrapInfo) (bool, string) {
	claim, err := b.readClaim()
	if err != nil {
		return false, err.Error()
	}
	if claim == nil {
		c, note := chooseClaim(b.node.self(), b.expect, infos)
		if c == nil {
			return false, note
		}
		if err := b.accept(*c); err != nil {
			return false, err.Error()
		}
		claim = c
	}
	if claim.By != b.id {
		return false, fmt.Sprintf("accepted the claim of %s; waiting to be contacted", claim.By)
	}
	for _, m := range claim.Members {
		if m.ID == b.id {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := pc.postJSON(cctx, BaseURL(m.HTTPAddr)+BootstrapClaimPath, claim, nil)
		cancel()
		if err != nil {
			return false, fmt.Sprintf("%s has not accepted the claim: %v", m.ID, err)
		}
	}
	var servers []raft.Server
	for _, m := range claim.Members {
		servers = append(servers, raft.Server{ID: raft.ServerID(m.ID), Address: raft.ServerAddress(m.RaftAddr), Suffrage: raft.Voter})
	}
	err = b.node.bootstrapCluster(servers)
	if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		return false, fmt.Sprintf("bootstrap: %v", err)
	}
	b.log.Info("every member accepted the claim; bootstrapped the cluster", "members", len(servers))
	return true, ""
}
