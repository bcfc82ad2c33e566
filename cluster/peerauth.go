package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// Node identity on node-to-node traffic. Under mutual TLS the Raft port
// (the guard, via RaftSecurity.Authorize), the /internal/ endpoints and
// join accept only node certificates (tlsconf.Source.PeerNode), and where
// this node knows a configuration, only one naming one of its servers (or,
// for join, the server joining). With a cluster token and no mutual TLS,
// the token is the proof, as before.

// mutualTLS reports whether peers prove themselves with certificates.
func (n *Node) mutualTLS() bool { return n.cfg.TLS != nil && n.cfg.TLS.Mutual() }

// members returns the ids of the servers of the latest configuration
// this node knows (none while it waits to be added to a cluster).
func (n *Node) members() map[string]raft.ServerAddress {
	r := n.raftRef.Load()
	if r == nil {
		return nil
	}
	cf := r.GetConfiguration()
	if cf.Error() != nil {
		return nil
	}
	out := map[string]raft.ServerAddress{}
	for _, s := range cf.Configuration().Servers {
		out[string(s.ID)] = s.Address
	}
	return out
}

// authorizePeer accepts a node name that is a server of the latest
// configuration, or any node while this node knows none (a node waiting to
// be added hears first from a leader it has never seen).
func (n *Node) authorizePeer(name string) error {
	m := n.members()
	if len(m) == 0 {
		return nil
	}
	if _, ok := m[name]; ok {
		return nil
	}
	return fmt.Errorf("node %q: %w", name, ErrNotMember)
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
// yet, and a node asking whether a cluster exists is not one) and on
// JoinPath, which checks its caller itself (AuthorizeJoin).
func (n *Node) requireNode(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, err := n.peerNode(r)
		if err == nil && name != "" && !strings.HasPrefix(r.URL.Path, BootstrapInfoPath) && r.URL.Path != JoinPath {
			err = n.authorizePeer(name)
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
	if err := n.authorizePeer(name); err != nil {
		return fmt.Errorf("%w: join of %q: the certificate names node %q, which is neither the joining node nor a member", ErrForbidden, id, name)
	}
	return nil
}

// trustedIP reports whether ip is a known peer's: its Raft handshakes do
// not count against the budget for strangers.
func (n *Node) trustedIP(ip string) bool {
	m := n.peerIPs.Load()
	return m != nil && (*m)[ip]
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
	n.peerIPs.Store(&ips)
}
