package clustertest

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/hashicorp/raft"
)

var errCut = errors.New("link cut by the test harness")

// track registers conn under the nodes it touches, so isolating either
// end drops it, like a partition drops packets of open connections.
//
// A connection that finishes dialing after its node was isolated (the dial
// raced with Isolate) is closed here, under the same lock Isolate takes, so
// no link outlives a cut.
func (c *Cluster) track(conn net.Conn, ids ...string) net.Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		if c.cut[id] {
			conn.Close()
			return conn
		}
	}
	return c.register(conn, ids...)
}

// register records conn under ids (c.mu held) without the cut check: the
// HTTP listener accepts a test client's connection to an isolated node.
func (c *Cluster) register(conn net.Conn, ids ...string) net.Conn {
	if c.conns == nil {
		c.conns = map[string]map[net.Conn]struct{}{}
	}
	for _, id := range ids {
		if id == "" {
			continue
		}
		if c.conns[id] == nil {
			c.conns[id] = map[net.Conn]struct{}{}
		}
		c.conns[id][conn] = struct{}{}
	}
	return conn
}

// faultStream wraps a node's Raft stream layer: while the node is isolated
// it cannot dial and accepted connections are closed at once.
type faultStream struct {
	raft.StreamLayer
	c  *Cluster
	id string
}

func (s *faultStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	peer := s.c.idOf(string(addr))
	if s.c.isCut(s.id, peer) {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errCut}
	}
	conn, err := s.StreamLayer.Dial(addr, timeout)
	if err != nil {
		return nil, err
	}
	return s.c.track(conn, s.id, peer), nil
}

func (s *faultStream) Accept() (net.Conn, error) {
	for {
		conn, err := s.StreamLayer.Accept()
		if err != nil {
			return nil, err
		}
		if s.c.isCut(s.id, "") {
			conn.Close()
			continue
		}
		return s.c.track(conn, s.id), nil
	}
}

// faultListener tracks a node's HTTP connections so isolating it drops them.
// It still accepts new ones: peers are cut at their dialer, while a test
// client stands in for a caller on the node's side of the partition.
type faultListener struct {
	net.Listener
	c  *Cluster
	id string
}

func (l *faultListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	return l.c.register(conn, l.id), nil
}

// transport is the HTTP transport node `from` uses to reach peers: dials to
// or from an isolated node fail like a dropped link.
func (c *Cluster) transport(from string) http.RoundTripper {
	d := &net.Dialer{Timeout: time.Second}
	return &http.Transport{
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     5 * time.Second,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			to := c.idOf(addr)
			if c.isCut(from, to) {
				return nil, &net.OpError{Op: "dial", Net: network, Err: errCut}
			}
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return c.track(conn, from, to), nil
		},
	}
}
