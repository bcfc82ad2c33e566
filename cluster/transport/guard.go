// Package transport is a node's Raft stream layer: the TCP listener that
// keeps its advertise address as configured (ListenTCP) and the guard in
// front of it that admits a connection only after TLS and/or the cluster
// token handshake, with per-address, total and idle limits (GuardStream). Raft's
// own NetworkTransport runs on top, unchanged.
package transport

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/internal/connlimit"
	"github.com/rlnode/rlnode/internal/wrongport"
	"github.com/rlnode/rlnode/tlsconf"
)

// RaftSecurity says how the Raft stream layer admits connections.
type RaftSecurity struct {
	// TLS, when set, wraps every Raft connection in TLS; with a CA both
	// sides present certificates signed by it, and both must be node
	// certificates (tlsconf.Source.PeerNode): an application's or admin's
	// client certificate is refused.
	TLS *tlsconf.Source
	// Authorize, when set, must accept the node name of a peer's
	// certificate (e.g. it is a member); nil accepts every node.
	Authorize func(node string) error
	// Trusted, when set, reports whether a remote IP is a known peer's:
	// its handshakes do not count against MaxPending, so a flood of
	// strangers cannot evict them. It is called on every accept: keep it
	// cheap (no DNS).
	Trusted func(ip string) bool
	// Token, when set, must be proven on every connection by the handshake
	// below before any Raft RPC is read.
	Token string
	// HTTPAPI is this node's HTTP address, named to an HTTP client that
	// dialled the Raft port instead.
	HTTPAPI string
	RaftLimits
}

// raftPortMessage is the answer to an HTTP request on the Raft port.
func raftPortMessage(httpAPI string) string {
	where := "on the node's --http-addr (8080 by default)"
	if httpAPI != "" {
		where = "at " + httpAPI
	}
	return "this is rlnode's Raft port, for node-to-node traffic only; the HTTP API is " + where
}

// RaftLimits bound what a connection to the Raft port can hold.
type RaftLimits struct {
	// HandshakeTimeout bounds the TLS and token handshakes of a new
	// connection; IdleTimeout closes an admitted connection on which
	// nothing arrives for that long.
	HandshakeTimeout, IdleTimeout time.Duration
	// MaxConnsPerIP caps the admitted Raft connections from one remote IP,
	// and, apart from those, its connections still in their handshake:
	// when that many are pending, the oldest gives way to a new one, so
	// sockets that never finish a handshake cannot keep a peer sharing
	// their address (same host, NAT) from connecting.
	MaxConnsPerIP int
	// MaxPending caps the connections still in their handshake from all
	// addresses not known as peers; beyond it the oldest of the address
	// holding the most gives way (see pendingSet).
	MaxPending int
	// MaxConns caps the admitted Raft connections from all addresses not
	// known as peers together; beyond it a new one is closed at once.
	// Without a token or TLS a connection is admitted the moment it is
	// accepted, so this, not MaxPending, is what bounds a flood from many
	// loopback addresses (127.0.0.0/8 is sixteen million of them).
	// Members' addresses count only against MaxConnsPerIP.
	MaxConns int
}

// Defaults for RaftSecurity. A live peer sends a heartbeat at least every
// heartbeat timeout; pooled connections raft keeps idle close after
// IdleTimeout and are redialled on next use. A peer keeps at most a pool of
// 8 connections plus a pipeline and a snapshot to each other node.
const (
	DefaultRaftHandshakeTimeout = 5 * time.Second
	DefaultRaftIdleTimeout      = 5 * time.Minute
	DefaultRaftMaxConnsPerIP    = 64
	DefaultRaftMaxPending       = 512
	DefaultRaftMaxConns         = 128
)

func (s *RaftLimits) setDefaults() {
	if s.HandshakeTimeout <= 0 {
		s.HandshakeTimeout = DefaultRaftHandshakeTimeout
	}
	if s.IdleTimeout <= 0 {
		s.IdleTimeout = DefaultRaftIdleTimeout
	}
	if s.MaxConnsPerIP <= 0 {
		s.MaxConnsPerIP = DefaultRaftMaxConnsPerIP
	}
	if s.MaxPending <= 0 {
		s.MaxPending = DefaultRaftMaxPending
	}
	if s.MaxConns <= 0 {
		s.MaxConns = DefaultRaftMaxConns
	}
}

// The token handshake: the dialer sends magic and a nonce Nc; the acceptor
// answers a nonce Ns and HMAC(token, "rlnode-raft server"|Nc|Ns); the
// dialer checks it and answers HMAC(token, "rlnode-raft client"|Nc|Ns).
// The token never crosses the wire, each side proves it, and neither proof
// can be replayed on another connection or reflected to the other role.
const (
	handshakeMagic = "RLNR\x01"
	nonceLen       = 32
	macLen         = sha256.Size
)

var errHandshake = errors.New("raft handshake failed: the peer does not know the cluster token")

// ProofMAC is the handshake's proof primitive, HMAC-SHA256(token,
// "rlnode-raft "+role | nc | ns), for the other node-to-node proofs of
// the token (the clock readings, cluster/clockproof.go): a distinct role
// keeps each proof from being replayed as another.
func ProofMAC(token []byte, role string, nc, ns []byte) []byte {
	return handshakeMAC(token, role, nc, ns)
}

func handshakeMAC(token []byte, role string, nc, ns []byte) []byte {
	m := hmac.New(sha256.New, token)
	m.Write([]byte("rlnode-raft " + role))
	m.Write(nc)
	m.Write(ns)
	return m.Sum(nil)
}

func clientHandshake(conn net.Conn, token []byte) error {
	hello := make([]byte, len(handshakeMagic)+nonceLen)
	copy(hello, handshakeMagic)
	nc := hello[len(handshakeMagic):]
	if _, err := rand.Read(nc); err != nil {
		return err
	}
	if _, err := conn.Write(hello); err != nil {
		return fmt.Errorf("raft handshake: %w", err)
	}
	answer := make([]byte, nonceLen+macLen)
	if _, err := io.ReadFull(conn, answer); err != nil {
		return fmt.Errorf("raft handshake (does the peer use the same --cluster-token?): %w", err)
	}
	ns, mac := answer[:nonceLen], answer[nonceLen:]
	if !hmac.Equal(mac, handshakeMAC(token, "server", nc, ns)) {
		return errHandshake
	}
	if _, err := conn.Write(handshakeMAC(token, "client", nc, ns)); err != nil {
		return fmt.Errorf("raft handshake: %w", err)
	}
	return nil
}

func serverHandshake(conn net.Conn, token []byte) error {
	hello := make([]byte, len(handshakeMagic)+nonceLen)
	if _, err := io.ReadFull(conn, hello); err != nil {
		return fmt.Errorf("raft handshake: %w", err)
	}
	if !bytes.Equal(hello[:len(handshakeMagic)], []byte(handshakeMagic)) {
		return errors.New("raft handshake: the peer did not start one (no --cluster-token on it, or not an rlnode node)")
	}
	nc := hello[len(handshakeMagic):]
	answer := make([]byte, nonceLen, nonceLen+macLen)
	if _, err := rand.Read(answer); err != nil {
		return err
	}
	answer = append(answer, handshakeMAC(token, "server", nc, answer[:nonceLen])...)
	if _, err := conn.Write(answer); err != nil {
		return fmt.Errorf("raft handshake: %w", err)
	}
	mac := make([]byte, macLen)
	if _, err := io.ReadFull(conn, mac); err != nil {
		return fmt.Errorf("raft handshake: %w", err)
	}
	if !hmac.Equal(mac, handshakeMAC(token, "client", nc, answer[:nonceLen])) {
		return errHandshake
	}
	return nil
}

// guardedStream admits Raft connections only after TLS and/or the token
// handshake, caps connections per remote IP and closes idle ones. Its
// accept loop runs the handshakes concurrently, so a slow or silent client
// cannot hold up the others.
type guardedStream struct {
	inner raft.StreamLayer
	sec   RaftSecurity
	token []byte
	log   hclog.Logger

	admitted chan net.Conn
	done     chan struct{}
	wg       sync.WaitGroup
	once     sync.Once

	mu                sync.Mutex
	perIP             *connlimit.PerIP
	pending           *pendingSet          // connections still in their handshake
	admittedStrangers int                  // admitted connections from addresses not trusted (MaxConns)
	lastWarn          map[string]time.Time // per kind of refusal, so a flood logs once a second
	dropped           map[string]int       // refusals not logged since the last line
}

// GuardStream wraps a stream layer (ListenTCP's, or a test harness's) with
// the checks sec asks for. It owns inner: Close closes it.
func GuardStream(inner raft.StreamLayer, sec RaftSecurity, log hclog.Logger) raft.StreamLayer {
	sec.setDefaults()
	if log == nil {
		log = hclog.NewNullLogger()
	}
	g := &guardedStream{inner: inner, sec: sec, token: []byte(sec.Token), log: log,
		admitted: make(chan net.Conn), done: make(chan struct{}), perIP: connlimit.NewPerIP(sec.MaxConnsPerIP), pending: newPendingSet(sec.MaxConnsPerIP, sec.MaxPending),
		lastWarn: map[string]time.Time{}, dropped: map[string]int{}}
	g.wg.Add(1)
	go g.acceptLoop()
	return g
}

func (g *guardedStream) acceptLoop() {
	defer g.wg.Done()
	for {
		conn, err := g.inner.Accept()
		if err != nil {
			select {
			case <-g.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			g.log.Warn("raft accept failed", "error", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		c := &countedConn{Conn: conn, ip: connlimit.RemoteIP(conn), idle: g.sec.IdleTimeout, at: time.Now()}
		c.trusted = g.sec.Trusted != nil && g.sec.Trusted(c.ip)
		for _, old := range g.addPending(c) {
			g.warn("raft connection dropped: too many handshakes in progress (from its address, or from addresses that are not members), the oldest gives way",
				"remote", old.RemoteAddr().String(), "max_per_ip", g.sec.MaxConnsPerIP, "max_pending", g.sec.MaxPending)
			old.Conn.Close() // its handshake fails and admit cleans up
		}
		g.wg.Add(1)
		go g.admit(c)
	}
}

// addPending records c as in its handshake and returns the connections it
// evicts to stay within the budgets.
func (g *guardedStream) addPending(c *countedConn) (evicted []*countedConn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.pending.add(c)
}

// donePending ends c's handshake stage and reports whether it is still
// wanted (not evicted meanwhile).
func (g *guardedStream) donePending(c *countedConn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pending.drop(c)
	return !c.evicted
}

// takeStranger counts one more admitted connection from an address that is
// not a member's, or reports false when MaxConns are open.
func (g *guardedStream) takeStranger() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.admittedStrangers >= g.sec.MaxConns {
		return false
	}
	g.admittedStrangers++
	return true
}

func (g *guardedStream) releaseStranger() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.admittedStrangers--
}

func (g *guardedStream) admit(c *countedConn) {
	defer g.wg.Done()
	select {
	case <-g.done: // Close may have swept pending before c was in it
		g.donePending(c)
		c.Close()
		return
	default:
	}
	conn, err := g.handshake(c)
	if !g.donePending(c) {
		c.Close()
		return
	}
	if err != nil {
		g.reject(c, err)
		return
	}
	if !g.perIP.Take(c.ip) {
		g.warn("raft connection refused: too many open from this address", "remote", c.RemoteAddr().String(), "max", g.sec.MaxConnsPerIP)
		c.Close()
		return
	}
	if !c.trusted && !g.takeStranger() {
		g.perIP.Release(c.ip)
		g.warn("raft connection refused: too many open from addresses that are not members", "remote", c.RemoteAddr().String(), "max", g.sec.MaxConns)
		c.Close()
		return
	}
	c.release = func() {
		g.perIP.Release(c.ip)
		if !c.trusted {
			g.releaseStranger()
		}
	}
	c.Conn.SetDeadline(time.Time{})
	c.live = true
	select {
	case g.admitted <- conn:
	case <-g.done:
		conn.Close()
	}
}

// handshake runs the TLS and token handshakes the guard asks for, within
// the handshake timeout, and returns the connection to hand to raft.
func (g *guardedStream) handshake(c *countedConn) (net.Conn, error) {
	var conn net.Conn = c
	c.Conn.SetDeadline(time.Now().Add(g.sec.HandshakeTimeout))
	if g.sec.TLS == nil {
		// An HTTP client that dialled this port by mistake (the CLI's
		// --addr) is told so, not left with "EOF"; the check runs on the
		// first read (the token handshake's, or raft's), so an open port
		// still admits a connection before it sends anything.
		conn = wrongport.SniffHTTP1(c, raftPortMessage(g.sec.HTTPAPI))
	}
	if g.sec.TLS != nil {
		tc := tls.Server(c, g.sec.TLS.ServerConfig())
		if err := tc.Handshake(); err != nil {
			return nil, fmt.Errorf("TLS handshake: %w", err)
		}
		if err := g.checkPeerNode(tc); err != nil {
			return nil, err
		}
		conn = tc
	}
	if len(g.token) > 0 {
		if err := serverHandshake(conn, g.token); err != nil {
			return nil, err
		}
	}
	return conn, nil
}

// checkPeerNode requires, under mutual TLS, that the peer's certificate is
// a node's and that Authorize accepts its name.
func (g *guardedStream) checkPeerNode(tc *tls.Conn) error {
	if !g.sec.TLS.Mutual() {
		return nil
	}
	cs := tc.ConnectionState()
	name, legacy, err := g.sec.TLS.PeerNode(&cs)
	if err != nil {
		return err
	}
	if legacy {
		g.warn("raft peer admitted with a legacy node certificate (no node identity; --tls-legacy-node-certs): re-issue it with rlnode tls init", "node", name)
	}
	if g.sec.Authorize != nil {
		if err := g.sec.Authorize(name); err != nil {
			return err
		}
	}
	return nil
}

func (g *guardedStream) reject(c net.Conn, err error) {
	g.warn("raft connection rejected", "remote", c.RemoteAddr().String(), "error", err)
	c.Close()
}

// warn logs msg at most once a second, counting the lines it held back.
func (g *guardedStream) warn(msg string, args ...any) {
	g.mu.Lock()
	now := time.Now()
	if now.Sub(g.lastWarn[msg]) < time.Second {
		g.dropped[msg]++
		g.mu.Unlock()
		return
	}
	g.lastWarn[msg] = now
	n := g.dropped[msg]
	g.dropped[msg] = 0
	g.mu.Unlock()
	if n > 0 {
		args = append(args, "similar_not_logged", n)
	}
	g.log.Warn(msg, args...)
}

func (g *guardedStream) Accept() (net.Conn, error) {
	select {
	case c := <-g.admitted:
		return c, nil
	case <-g.done:
		return nil, net.ErrClosed
	}
}

func (g *guardedStream) Close() error {
	var err error
	g.once.Do(func() {
		close(g.done)
		err = g.inner.Close()
		// Handshakes in progress end now rather than at their timeout.
		// (Closed outside the lock: closing releases the per-IP slot.)
		g.mu.Lock()
		pending := g.pending.all()
		g.mu.Unlock()
		for _, c := range pending {
			c.Conn.Close()
		}
		g.wg.Wait()
	})
	return err
}

func (g *guardedStream) Addr() net.Addr { return g.inner.Addr() }

func (g *guardedStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	conn, err := g.inner.Dial(addr, timeout)
	if err != nil {
		return nil, err
	}
	conn.SetDeadline(time.Now().Add(timeout))
	if g.sec.TLS != nil {
		host, _, _ := net.SplitHostPort(string(addr))
		tc := tls.Client(conn, g.sec.TLS.ClientConfig(host))
		if err := tc.Handshake(); err != nil {
			conn.Close()
			return nil, fmt.Errorf("raft TLS handshake with %s: %w", addr, err)
		}
		if err := g.checkPeerNode(tc); err != nil {
			conn.Close()
			return nil, fmt.Errorf("raft peer %s: %w", addr, err)
		}
		conn = tc
	}
	if len(g.token) > 0 {
		if err := clientHandshake(conn, g.token); err != nil {
			conn.Close()
			return nil, fmt.Errorf("%s: %w", addr, err)
		}
	}
	conn.SetDeadline(time.Time{})
	return conn, nil
}

// countedConn is an accepted connection: it frees its slot in the per-IP
// count once, when closed, and closes itself when no data arrives for idle.
type countedConn struct {
	net.Conn
	ip      string
	at      time.Time // accepted
	trusted bool      // from a known peer's address: not a stranger to the pending budget
	release func()    // set once admitted: gives back its address's slot
	idle    time.Duration
	live    bool // set once admitted: from then on reads carry the idle deadline
	evicted bool // guarded by the stream's mu
	once    sync.Once
}

func (c *countedConn) Read(p []byte) (int, error) {
	if c.live {
		c.Conn.SetReadDeadline(time.Now().Add(c.idle))
	}
	return c.Conn.Read(p)
}

func (c *countedConn) Close() error {
	c.once.Do(func() {
		if c.release != nil {
			c.release()
		}
	})
	return c.Conn.Close()
}
