package connlimit

import (
	"net"
	"net/http"
	"testing"
	"time"
)

// keepAlive serves a KeepAlive listener, handing out what Accept returns.
func keepAlive(t *testing.T, total, perIP int) (*KeepAlive, string, chan net.Conn) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewKeepAlive(raw, total, perIP)
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	t.Cleanup(func() { l.Close() })
	return l, raw.Addr().String(), accepted
}

func next(t *testing.T, accepted chan net.Conn) net.Conn {
	t.Helper()
	select {
	case c := <-accepted:
		t.Cleanup(func() { c.Close() })
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("no connection accepted")
		return nil
	}
}

// An address at its cap gets room by losing its oldest idle connection;
// with none idle, its new connection is refused.
func TestKeepAlivePerAddress(t *testing.T) {
	l, addr, accepted := keepAlive(t, 8, 2)
	c1, c2 := dial(t, addr), dial(t, addr)
	s1, s2 := next(t, accepted), next(t, accepted)
	l.ConnState(s1, http.StateIdle)
	l.ConnState(s2, http.StateActive)
	c3 := dial(t, addr)
	next(t, accepted)
	if !closedByServer(c1, 2*time.Second) {
		t.Fatal("the oldest idle connection stayed open when its address passed the cap")
	}
	c4 := dial(t, addr) // c2 and c3 are busy: c4 is refused
	if !closedByServer(c4, 2*time.Second) {
		t.Fatal("a connection past the cap with none idle was not refused")
	}
	for _, c := range []net.Conn{c2, c3} {
		if closedByServer(c, 100*time.Millisecond) {
			t.Fatal("a busy or new connection was closed")
		}
	}
}

// Past seven eighths of the total, a new connection from anyone closes the
// oldest idle connection first.
func TestKeepAliveIdleFirstNearTheCap(t *testing.T) {
	l, addr, accepted := keepAlive(t, 8, 8)
	var clients []net.Conn
	for range 7 {
		clients = append(clients, dial(t, addr))
		l.ConnState(next(t, accepted), http.StateIdle)
	}
	dial(t, addr)
	next(t, accepted)
	if !closedByServer(clients[0], 2*time.Second) {
		t.Fatal("the oldest idle connection stayed open at the high-water mark")
	}
}
