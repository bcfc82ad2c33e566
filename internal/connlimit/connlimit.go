// Package connlimit caps the connections a public listener holds open, so
// a flood of sockets runs into the cap rather than into the process's file
// descriptor limit, which the Raft log, snapshots, TLS reloads and the
// other listeners share.
package connlimit

import (
	"net"
	"sync"

	"golang.org/x/net/netutil"
)

// Wrap caps ln at total open connections: Accept waits for one to close,
// leaving newer ones in the kernel's backlog. With perIP > 0 one remote
// address holds at most perIP of them, so a single client cannot take every
// slot; its connections beyond that are closed as soon as they are
// accepted.
func Wrap(ln net.Listener, total, perIP int) net.Listener {
	ln = netutil.LimitListener(ln, total)
	if perIP <= 0 {
		return ln
	}
	return &perIPListener{Listener: ln, counts: NewPerIP(perIP)}
}

type perIPListener struct {
	net.Listener
	counts *PerIP
}

func (l *perIPListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := RemoteIP(c)
		if l.counts.Take(ip) {
			return &countedConn{Conn: c, release: func() { l.counts.Release(ip) }}, nil
		}
		c.Close()
	}
}

// PerIP counts open connections per remote address against a maximum.
// The Raft port's guard and Wrap share it.
type PerIP struct {
	max  int
	mu   sync.Mutex
	open map[string]int
}

// NewPerIP allows max open connections per address.
func NewPerIP(max int) *PerIP { return &PerIP{max: max, open: map[string]int{}} }

// Take counts one more connection from ip, or reports false when ip
// already holds the maximum.
func (p *PerIP) Take(ip string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.open[ip] >= p.max {
		return false
	}
	p.open[ip]++
	return true
}

// Release gives back one of ip's slots.
func (p *PerIP) Release(ip string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.open[ip]--; p.open[ip] <= 0 {
		delete(p.open, ip)
	}
}

// RemoteIP is the connection's remote IP address (its whole remote
// address when that has no port).
func RemoteIP(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	host, _, err := net.SplitHostPort(c.RemoteAddr().String())
	if err != nil {
		return c.RemoteAddr().String()
	}
	return host
}

// countedConn frees its remote address's slot once, however often it is
// closed.
type countedConn struct {
	net.Conn
	release func()
	once    sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}
