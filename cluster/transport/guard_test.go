package transport

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func guarded(t *testing.T, sec RaftSecurity) raft.StreamLayer {
	t.Helper()
	inner, err := ListenTCP("127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := GuardStream(inner, sec, nil)
	t.Cleanup(func() { g.Close() })
	return g
}

// echo answers each admitted connection's first 4 bytes with themselves.
func echo(srv raft.StreamLayer) {
	go func() {
		for {
			c, err := srv.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b := make([]byte, 4)
				if _, err := c.Read(b); err == nil {
					c.Write(b)
				}
			}()
		}
	}()
}

// A dialer with the token gets a connection through and can talk; with a
// wrong token both sides refuse (each proves the token to the other).
func TestGuardTokenHandshake(t *testing.T) {
	srv := guarded(t, RaftSecurity{Token: "right"})
	echo(srv)
	good := guarded(t, RaftSecurity{Token: "right"})
	c, err := good.Dial(raft.ServerAddress(srv.Addr().String()), 5*time.Second)
	if err != nil {
		t.Fatalf("dial with the token: %v", err)
	}
	c.Write([]byte("ping"))
	b := make([]byte, 4)
	if _, err := c.Read(b); err != nil || string(b) != "ping" {
		t.Fatalf("echo over an admitted connection: %q %v", b, err)
	}
	c.Close()

	bad := guarded(t, RaftSecurity{Token: "wrong"})
	if _, err := bad.Dial(raft.ServerAddress(srv.Addr().String()), 5*time.Second); err == nil || !strings.Contains(err.Error(), "token") {
		t.Fatalf("dial with a wrong token: %v, want a handshake failure", err)
	}
	// A node without a token reaches a node with one: refused.
	plain := guarded(t, RaftSecurity{})
	c, err = plain.Dial(raft.ServerAddress(srv.Addr().String()), 5*time.Second)
	if err == nil {
		c.Write(make([]byte, 64))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(make([]byte, 64)); err == nil && n > 0 {
			// The node answers the hello with its nonce and MAC, then
			// waits for ours; garbage as the MAC gets the connection closed.
			c.Write(make([]byte, 64))
			if _, err := c.Read(make([]byte, 1)); err == nil {
				t.Fatal("connection without the token stayed usable")
			}
		}
		c.Close()
	}
}

// Close does not wait out the handshake timeout of a silent connection.
func TestGuardCloseEndsPendingHandshakes(t *testing.T) {
	inner, err := ListenTCP("127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := GuardStream(inner, RaftSecurity{Token: "t", RaftLimits: RaftLimits{HandshakeTimeout: time.Hour}}, nil)
	c, err := net.Dial("tcp", g.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(100 * time.Millisecond) // let the accept loop take it
	done := make(chan struct{})
	go func() { g.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Close blocked on a connection in its handshake")
	}
}

// Sockets that never finish their handshake cannot lock out a peer that
// shares their address: the oldest pending one gives way to each new one,
// and admitted connections have their own budget.
func TestGuardSilentSocketsGiveWayToAPeer(t *testing.T) {
	const max = 4
	srv := guarded(t, RaftSecurity{Token: "right", RaftLimits: RaftLimits{HandshakeTimeout: time.Hour, MaxConnsPerIP: max}})
	echo(srv)
	var silent []net.Conn
	defer func() {
		for _, c := range silent {
			c.Close()
		}
	}()
	for range 5 * max {
		c, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, c)
	}
	time.Sleep(200 * time.Millisecond) // let the accept loop take them
	// All but the newest max were dropped, at once, not at the (hour-long)
	// handshake timeout.
	for i, c := range silent[:4*max] {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
			t.Fatalf("silent connection %d of %d still held: %v", i+1, len(silent), err)
		}
	}
	peer := guarded(t, RaftSecurity{Token: "right"})
	for i := range max { // admitted connections have their own budget
		c, err := peer.Dial(raft.ServerAddress(srv.Addr().String()), 5*time.Second)
		if err != nil {
			t.Fatalf("peer dial %d while %d silent sockets are pending: %v", i+1, max, err)
		}
		defer c.Close()
		c.Write([]byte("ping"))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 4)); err != nil {
			t.Fatalf("peer connection %d not served: %v", i+1, err)
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// The budget of pending handshakes from strangers evicts the oldest
// connection of the address holding the most, so a flood from many
// addresses evicts its own sockets and a peer's single handshake stays;
// a trusted (member) address does not count against the budget at all.
func TestPendingSetEvictsTheFullestStranger(t *testing.T) {
	p := newPendingSet(64, 4)
	at := time.Now()
	conn := func(ip string, trusted bool) *countedConn {
		at = at.Add(time.Millisecond)
		return &countedConn{ip: ip, at: at, trusted: trusted}
	}
	peer := conn("10.0.0.1", false)
	member := conn("10.0.0.2", true)
	if ev := p.add(peer); len(ev) != 0 {
		t.Fatalf("evicted %v with room left", ev)
	}
	p.add(member)
	var flood []*countedConn
	for i := range 20 {
		c := conn(fmt.Sprintf("10.1.0.%d", i%3), false)
		flood = append(flood, c)
		for _, ev := range p.add(c) {
			if ev == peer || ev == member {
				t.Fatalf("flood connection %d evicted the peer's or the member's handshake", i)
			}
		}
	}
	if p.strangers != 4 {
		t.Fatalf("%d strangers pending, want the budget of 4", p.strangers)
	}
	if peer.evicted || member.evicted || !flood[0].evicted {
		t.Fatalf("evicted: peer %v member %v oldest flood %v", peer.evicted, member.evicted, flood[0].evicted)
	}
	for _, c := range p.all() {
		p.drop(c)
	}
	if p.strangers != 0 || len(p.byIP) != 0 {
		t.Fatalf("after dropping all: %d strangers, %d addresses", p.strangers, len(p.byIP))
	}
}

// Without a token or TLS every connection is admitted at once, so the
// pending budget never applies: admitted connections from addresses that
// are not members' have a total cap of their own (many loopback source
// addresses, each under its per-address cap, held one node's Raft port
// without bound). A member's address is not counted, and a slot freed is
// taken again.
func TestGuardCapsAdmittedStrangersInTotal(t *testing.T) {
	const max = 3
	srv := guarded(t, RaftSecurity{Trusted: func(ip string) bool { return ip == "127.0.0.1" },
		RaftLimits: RaftLimits{MaxConns: max}})
	// Each admitted connection is greeted with one byte and held until
	// its dialer closes it.
	go func() {
		for {
			c, err := srv.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.Write([]byte("A"))
				c.Read(make([]byte, 1))
			}()
		}
	}()
	dial := func(src string) (net.Conn, bool) {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatalf("dial from %s: %v", src, err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = c.Read(make([]byte, 1))
		if isTimeout(err) {
			t.Fatalf("connection from %s neither admitted nor closed", src)
		}
		return c, err == nil
	}
	var admitted []net.Conn
	for i := range 2 * max {
		src := fmt.Sprintf("127.3.0.%d", i+1)
		if c, ok := dial(src); ok {
			admitted = append(admitted, c)
		} else if i < max {
			t.Fatalf("connection %d (from %s) refused under the cap of %d", i+1, src, max)
		}
	}
	if len(admitted) != max {
		t.Fatalf("%d connections from addresses that are not members' admitted, want the cap of %d", len(admitted), max)
	}
	if _, ok := dial("127.0.0.1"); !ok {
		t.Fatal("a member's address was refused while strangers hold the total")
	}
	admitted[0].Close()
	pollTrue(t, func() bool { _, ok := dial("127.3.1.1"); return ok })
}

func pollTrue(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not met within 10 s")
}
