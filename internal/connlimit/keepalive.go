package connlimit

import (
	"container/list"
	"net"
	"net/http"
	"sync"
)

// KeepAlive caps an HTTP listener's connections in total and per remote
// address, and spends idle keep-alive connections first: an idle
// connection costs its client only a reconnect, while refusing a new one
// costs it an answer. It closes the oldest idle connection
//   - of the same address, when a new connection would pass the address's
//     cap (only when it has none idle is the new one refused), and
//   - of any address, once the open connections reach the high-water mark
//     (seven eighths of the total), so the port keeps room to accept.
//
// Accept waits, as netutil.LimitListener does, only when every slot holds
// a busy connection. The server must report connection states through
// ConnState (http.Server.ConnState) for idle connections to be known.
type KeepAlive struct {
	net.Listener
	total, perIP, high int

	mu    sync.Mutex
	open  int
	byIP  map[string]*list.List // of *keepAliveConn, oldest first
	idle  *list.List            // of *keepAliveConn, longest idle first
	wake  chan struct{}         // a slot freed or a connection went idle
	done  chan struct{}
	close sync.Once
}

// NewKeepAlive wraps ln with at most total open connections, perIP of them
// from one remote address (perIP <= 0: no per-address cap).
func NewKeepAlive(ln net.Listener, total, perIP int) *KeepAlive {
	if perIP <= 0 || perIP > total {
		perIP = total
	}
	return &KeepAlive{Listener: ln, total: total, perIP: perIP, high: total - total/8,
		byIP: map[string]*list.List{}, idle: list.New(), wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// keepAliveConn is one accepted connection and its place in the lists.
type keepAliveConn struct {
	net.Conn
	l        *KeepAlive
	ip       string
	inIP     *list.Element
	inIdle   *list.Element // nil unless idle
	released bool
}

// Close frees the connection's slot once, however often it is closed.
func (c *keepAliveConn) Close() error {
	c.l.release(c)
	return c.Conn.Close()
}

// Accept returns the next connection within the caps.
func (l *KeepAlive) Accept() (net.Conn, error) {
	for {
		if err := l.takeSlot(); err != nil {
			return nil, err
		}
		c, err := l.Listener.Accept()
		if err != nil {
			l.mu.Lock()
			l.open--
			l.mu.Unlock()
			return nil, err
		}
		if kc := l.admit(c); kc != nil {
			return kc, nil
		}
	}
}

// takeSlot reserves one of the total slots, closing idle connections past
// the high-water mark and waiting while every slot is busy.
func (l *KeepAlive) takeSlot() error {
	for {
		l.mu.Lock()
		var evict *keepAliveConn
		if l.open >= l.high {
			evict = front(l.idle)
		}
		if evict == nil && l.open < l.total {
			l.open++
			l.mu.Unlock()
			return nil
		}
		l.mu.Unlock()
		if evict != nil {
			evict.Close()
			continue
		}
		select {
		case <-l.wake:
		case <-l.done:
			return net.ErrClosed
		}
	}
}

// admit counts c against its address, making room by closing that
// address's oldest idle connection; nil when c was refused.
func (l *KeepAlive) admit(c net.Conn) *keepAliveConn {
	ip := RemoteIP(c)
	for {
		l.mu.Lock()
		conns := l.byIP[ip]
		if conns == nil || conns.Len() < l.perIP {
			if conns == nil {
				conns = list.New()
				l.byIP[ip] = conns
			}
			kc := &keepAliveConn{Conn: c, l: l, ip: ip}
			kc.inIP = conns.PushBack(kc)
			l.mu.Unlock()
			return kc
		}
		evict := oldestIdleOf(conns)
		if evict == nil {
			l.open--
			l.mu.Unlock()
			l.signal()
			c.Close()
			return nil
		}
		l.mu.Unlock()
		evict.Close()
	}
}

// front is the first connection of a list, or nil.
func front(idle *list.List) *keepAliveConn {
	if e := idle.Front(); e != nil {
		return e.Value.(*keepAliveConn)
	}
	return nil
}

// oldestIdleOf is the address's longest-open idle connection, or nil.
func oldestIdleOf(conns *list.List) *keepAliveConn {
	for e := conns.Front(); e != nil; e = e.Next() {
		if kc := e.Value.(*keepAliveConn); kc.inIdle != nil {
			return kc
		}
	}
	return nil
}

func (l *KeepAlive) release(c *keepAliveConn) {
	l.mu.Lock()
	if c.released {
		l.mu.Unlock()
		return
	}
	c.released = true
	l.open--
	if c.inIdle != nil {
		l.idle.Remove(c.inIdle)
		c.inIdle = nil
	}
	if conns := l.byIP[c.ip]; conns != nil {
		conns.Remove(c.inIP)
		if conns.Len() == 0 {
			delete(l.byIP, c.ip)
		}
	}
	l.mu.Unlock()
	l.signal()
}

func (l *KeepAlive) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// ConnState is the http.Server.ConnState hook that tells the listener
// which connections are idle.
func (l *KeepAlive) ConnState(c net.Conn, state http.ConnState) {
	// Behind TLS the server sees the *tls.Conn around ours.
	for {
		inner, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = inner.NetConn()
	}
	kc, ok := c.(*keepAliveConn)
	if !ok || kc.l != l {
		return
	}
	l.mu.Lock()
	switch {
	case kc.released:
	case state == http.StateIdle && kc.inIdle == nil:
		kc.inIdle = l.idle.PushBack(kc)
	case state != http.StateIdle && kc.inIdle != nil:
		l.idle.Remove(kc.inIdle)
		kc.inIdle = nil
	}
	l.mu.Unlock()
	if state == http.StateIdle {
		l.signal()
	}
}

// Close stops Accept; open connections stay open for the server to close.
func (l *KeepAlive) Close() error {
	l.close.Do(func() { close(l.done) })
	return l.Listener.Close()
}
