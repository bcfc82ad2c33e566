package connlimit

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// serve accepts on a capped loopback listener and reports each accepted
// connection, keeping it open until the test ends.
func serve(t *testing.T, total, perIP int) (addr string, accepted chan net.Conn) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := Wrap(raw, total, perIP)
	accepted = make(chan net.Conn, 64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for {
			select {
			case c := <-accepted:
				c.Close()
			default:
				return
			}
		}
	})
	return raw.Addr().String(), accepted
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByServer reports whether the server closed c (EOF or reset)
// within wait.
func closedByServer(c net.Conn, wait time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(wait))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func TestTotalCapWaitsForAFreeSlot(t *testing.T) {
	addr, accepted := serve(t, 2, 0)
	dial(t, addr)
	dial(t, addr)
	first := <-accepted
	<-accepted
	dial(t, addr) // the kernel completes it; the listener must not accept it yet
	select {
	case <-accepted:
		t.Fatal("a third connection was accepted with a cap of 2")
	case <-time.After(300 * time.Millisecond):
	}
	first.Close()
	select {
	case <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("closing one connection did not let the waiting one in")
	}
}

func TestPerIPCapClosesTheExcessAndFreesSlots(t *testing.T) {
	addr, accepted := serve(t, 100, 2)
	a, b := dial(t, addr), dial(t, addr)
	held := []net.Conn{<-accepted, <-accepted}
	extra := dial(t, addr)
	if !closedByServer(extra, 5*time.Second) {
		t.Fatal("a third connection from one address was kept with a per-IP cap of 2")
	}
	for _, c := range []net.Conn{a, b} {
		if closedByServer(c, 100*time.Millisecond) {
			t.Fatal("a connection within the cap was closed")
		}
	}
	held[0].Close()
	held[0].Close() // a second close must not free a second slot
	dial(t, addr)
	<-accepted
	if c := dial(t, addr); !closedByServer(c, 5*time.Second) {
		t.Fatal("closing one connection twice freed two slots")
	}
	if _, err := io.WriteString(b, "x"); err != nil {
		t.Fatalf("held connection broken: %v", err)
	}
}
