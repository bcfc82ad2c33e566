package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Node identity on node-to-node traffic. Under mutual TLS the Raft port
// (the guard, via RaftSecurity.Authorize), the /internal/ endpoints and
// join accept only node certificates (tlsconf.Source.PeerNode), and of
// those only members' (peerAuth). With a cluster token and no mutual TLS,
// the token is the proof, as before.
//
// Who is a member can go stale on the node that judges it: a node
// catching up (a snapshot older than its leader, a partition across a
// re-add) does not know the configuration that names its leader, and
// refusing the leader is what keeps it from ever learning it (issue 41).
// So a node that does not lead and cannot place a name asks the servers of
// its own configuration, the ones it trusts, whether that name is in
// theirs (ConfigurationPath); one yes admits it. A leader's configuration
// is the cluster's: it asks no one.

// Vouching: how long an answer is kept, how long a round may take.
const (
	vouchedFor    = 30 * time.Second
	vouchRefused  = 2 * time.Second
	vouchTimeout  = 2 * time.Second
	refusalMemory = time.Minute
	// maxVouchAnswers bounds the answers kept.
	maxVouchAnswers = 1024
)

// membershipView is what peerAuth reads of this node: the latest
// configuration it knows with its last log index, and whether it leads.
type membershipView interface {
	configuration() (servers []raft.Server, lastIndex uint64)
	leading() bool
}

// memberAsker asks server id (a member this node trusts) for its latest
// configuration; the answer must come from id's own certificate.
type memberAsker interface {
	askConfiguration(ctx context.Context, id string) (ConfigurationAnswer, error)
}

// PeerRefusal is the last node this node refused as a non-member.
type PeerRefusal struct {
	Node string    `json:"node"`
	At   time.Time `json:"at"`
	// LastIndex is this node's last log index when it judged.
	LastIndex uint64 `json:"lastIndex"`
	Leading   bool   `json:"leading"`
}

// peerAuth decides which node names may talk to this node.
type peerAuth struct {
	self string
	view membershipView
	ask  memberAsker
	now  func() time.Time
	log  hclog.Logger

	mu      sync.Mutex
	answers map[string]vouch
	refused *PeerRefusal
	// asking makes one round of questions at a time: a burst of
	// connections from one peer (raft's pool) asks once.
	asking sync.Mutex
}

type vouch struct {
	ok    bool
	until time.Time
}

func newPeerAuth(self string, view membershipView, ask memberAsker, now func() time.Time, log hclog.Logger) *peerAuth {
	return &peerAuth{self: self, view: view, ask: ask, now: now, log: log, answers: map[string]vouch{}}
}

// authorize accepts a node name that is a server of this node's latest
// configuration, any node while it knows none (a node waiting to be added
// hears first from a leader it has never seen), and, on a node that does
// not lead, a node a member of its configuration names in its own.
func (a *peerAuth) authorize(name string) error {
	servers, index := a.view.configuration()
	if len(servers) == 0 || hasServer(servers, name) {
		return nil
	}
	leading := a.view.leading()
	if !leading && a.vouched(name, servers) {
		return nil
	}
	a.mu.Lock()
	a.refused = &PeerRefusal{Node: name, At: a.now(), LastIndex: index, Leading: leading}
	a.mu.Unlock()
	if leading {
		return fmt.Errorf("node %q: %w", name, ErrNotMember)
	}
	return fmt.Errorf("node %q is not in this node's configuration (its log at index %d) and no member of it names it: %w", name, index, ErrNotMember)
}

// vouched reports whether a server of servers (other than this node and
// name) names name in its latest configuration, asking them all at once
// unless a recent answer is known.
func (a *peerAuth) vouched(name string, servers []raft.Server) bool {
	if v, ok := a.cached(name); ok {
		return v
	}
	a.asking.Lock()
	defer a.asking.Unlock()
	if v, ok := a.cached(name); ok {
		return v
	}
	ctx, cancel := context.WithTimeout(context.Background(), vouchTimeout)
	defer cancel()
	yes := make(chan string, len(servers))
	var wg sync.WaitGroup
	for _, s := range servers {
		id := string(s.ID)
		if id == a.self || id == name {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ans, err := a.ask.askConfiguration(ctx, id)
			if err == nil && ans.names(name) {
				yes <- id
			}
		}()
	}
	go func() { wg.Wait(); close(yes) }()
	by, ok := <-yes
	cancel() // the others need not finish
	ttl := vouchRefused
	if ok {
		ttl = vouchedFor
		a.log.Info("admitting a node this node's configuration does not name yet: a member names it", "node", name, "vouched_by", by)
	}
	a.mu.Lock()
	if len(a.answers) >= maxVouchAnswers {
		clear(a.answers) // names come from node certificates: few; a cache, not state
	}
	a.answers[name] = vouch{ok: ok, until: a.now().Add(ttl)}
	a.mu.Unlock()
	return ok
}

func (a *peerAuth) cached(name string) (ok, known bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, known := a.answers[name]
	if !known || !a.now().Before(v.until) {
		delete(a.answers, name)
		return false, false
	}
	return v.ok, true
}

// lastRefusal is the node refused last, within the last minute.
func (a *peerAuth) lastRefusal() (PeerRefusal, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.refused == nil || a.now().Sub(a.refused.At) > refusalMemory {
		return PeerRefusal{}, false
	}
	return *a.refused, true
}

func hasServer(servers []raft.Server, id string) bool {
	for _, s := range servers {
		if string(s.ID) == id {
			return true
		}
	}
	return false
}

// raftView is membershipView over the node's raft.
type raftView struct{ n *Node }

func (v raftView) configuration() ([]raft.Server, uint64) {
	r := v.n.raftRef.Load()
	if r == nil {
		return nil, 0
	}
	last := r.LastIndex()
	cf := r.GetConfiguration()
	if cf.Error() != nil {
		return nil, 0
	}
	return cf.Configuration().Servers, last
}

func (v raftView) leading() bool {
	r := v.n.raftRef.Load()
	return r != nil && r.State() == raft.Leader
}

// peerAsker is memberAsker over the node's peer client.
type peerAsker struct{ n *Node }

func (p peerAsker) askConfiguration(ctx context.Context, id string) (ConfigurationAnswer, error) {
	addr, ok := p.n.peerHTTPAddr(id)
	if !ok {
		return ConfigurationAnswer{}, fmt.Errorf("no HTTP address known for %s", id)
	}
	return askConfiguration(ctx, p.n.fwd.peers, p.n.cfg.TLS, addr, id, false)
}

// mutualTLS reports whether peers prove themselves with certificates.
func (n *Node) mutualTLS() bool { return n.cfg.TLS != nil && n.cfg.TLS.Mutual() }

// members returns the servers of the latest configuration this node knows
// (none while it waits to be added to a cluster).
func (n *Node) members() map[string]raft.ServerAddress {
	servers, _ := raftView{n}.configuration()
	out := map[string]raft.ServerAddress{}
	for _, s := range servers {
		out[string(s.ID)] = s.Address
	}
	return out
}

// peerNode checks an HTTP request's client certificate under mutual TLS
// and returns the node it names ("" without mutual TLS).
func (n *Node) peerNode(r *http.Request) (string, error) {
	if !n.mutualTLS() {
		return "", nil
	}
	name, legacy, err := n.cfg.TLS.PeerNode(r.TLS)
	if err != nil {
		return "", err
	}
	if legacy {
		n.log.Warn("node-to-node request with a legacy node certificate (--tls-legacy-node-certs): re-issue it with rlnode tls init", "node", name, "path", r.URL.Path)
	}
	return name, nil
}

// requireNode guards /internal/: a node certificate, of a member except
// on the bootstrap endpoints (nodes forming a cluster have no members
// yet, and a node asking whether a cluster exists is not one), on
// ConfigurationPath (a node catching up asks it, and vouching must not
// ask in turn) and on JoinPath, which checks its caller itself
// (AuthorizeJoin).
func (n *Node) requireNode(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, err := n.peerNode(r)
		if err == nil && name != "" && !strings.HasPrefix(r.URL.Path, BootstrapInfoPath) && r.URL.Path != JoinPath && r.URL.Path != ConfigurationPath {
			err = n.auth.authorize(name)
		}
		if err != nil {
			// Named as cluster errors (errorCodes), so a removed sender
			// knows it is one (ErrNotMember) rather than forbidden.
			writeError(w, n.cfg.ID, fmt.Errorf("%w: node-to-node endpoint: %w", ErrForbidden, err))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// ErrForbidden marks a request whose caller may not ask for it.
var ErrForbidden = errors.New("forbidden")

// AuthorizeJoin checks who asks to join id (r is the request, public or
// internal): under mutual TLS a join must come from the joining node's own
// certificate, or from a member's (a follower passing it on). An operator
// adding a node that waits (--wait-for-join) runs `rlnode join` with that
// node's certificate. Errors wrap ErrForbidden.
func (n *Node) AuthorizeJoin(r *http.Request, id string) error {
	name, err := n.peerNode(r)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrForbidden, err)
	}
	if name == "" || name == id {
		return nil
	}
	if err := n.auth.authorize(name); err != nil {
		return fmt.Errorf("%w: join of %q: the certificate names node %q, which is neither the joining node nor a member", ErrForbidden, id, name)
	}
	return nil
}

// refusing words the last refusal of a node as a non-member (within a
// minute), or "".
func (n *Node) refusing() string {
	r, ok := n.auth.lastRefusal()
	if !ok {
		return ""
	}
	if r.Leading {
		return fmt.Sprintf("refused node %s at %s: not in this leader's configuration", r.Node, r.At.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("refusing node %s (last at %s): it is not in this node's configuration (log at index %d) and no member this node can reach names it; if it is this cluster's leader, this node cannot catch up: restart it with --join, which asks the leader and rejoins empty if the cluster no longer counts it a member",
		r.Node, r.At.UTC().Format(time.RFC3339), r.LastIndex)
}

// refusedRecently says whether this node refused a node as a non-member
// within the last minute.
func (n *Node) refusedRecently() bool {
	_, ok := n.auth.lastRefusal()
	return ok
}

// peerHTTPAddr is the HTTP address of member id: from the replicated
// metadata, else the cache, else the bootstrap claim this node accepted.
func (n *Node) peerHTTPAddr(id string) (string, bool) {
	if meta, ok := n.fsm.Node(id); ok && meta.HTTPAddr != "" {
		return meta.HTTPAddr, true
	}
	if a, ok := n.peerAddrs.get(id); ok {
		return a, true
	}
	if c, err := n.boot.readClaim(); err == nil && c != nil {
		for _, m := range c.Members {
			if m.ID == id && m.HTTPAddr != "" {
				return m.HTTPAddr, true
			}
		}
	}
	return "", false
}

// refreshPeerIPs resolves the hosts of the configuration's Raft addresses
// and of the members' HTTP addresses, off the accept path (the clock
// check's goroutine calls it every five seconds).
func (n *Node) refreshPeerIPs() {
	hosts := map[string]bool{}
	for id, addr := range n.members() {
		if h, _, err := net.SplitHostPort(string(addr)); err == nil {
			hosts[h] = true
		}
		if meta, ok := n.fsm.Node(id); ok {
			if h, _, err := net.SplitHostPort(meta.HTTPAddr); err == nil {
				hosts[h] = true
			}
		}
	}
	ips := map[string]bool{}
	for h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			ips[ip.String()] = true
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		addrs, err := net.DefaultResolver.LookupHost(ctx, h)
		cancel()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if ip := net.ParseIP(a); ip != nil {
				ips[ip.String()] = true
			}
		}
	}
	n.peerAddrs.ips.Store(&ips)
}
