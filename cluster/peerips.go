package cluster

import (
	"context"
	"net"
	"time"
)

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
