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
	return &perIPListener{Listener: ln, max: perIP, open: map[string]int{}}
}

type perIPListener struct {
	net.Listener
	max int

	mu   sync.Mutex
	open map[string]int
}

func (l *perIPListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(c)
		if l.take(ip) {
			return &countedConn{Conn: c, release: func() { l.release(ip) }}, nil
		}
		c.Close()
	}
}

func (l *perIPListener) take(ip string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[ip] >= l.max {
		return false
	}
	l.open[ip]++
	return true
}

func (l *perIPListener) release(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[ip]--; l.open[ip] <= 0 {
		delete(l.open, ip)
	}
}

func remoteIP(c net.Conn) string {
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
