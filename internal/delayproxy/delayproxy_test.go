package delayproxy

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echo serves one line back per line on a loopback port.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip sends a line through addr and waits up to wait for it back.
func roundTrip(c net.Conn, wait time.Duration) (time.Duration, error) {
	start := time.Now()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	c.SetReadDeadline(time.Now().Add(wait))
	_, err := bufio.NewReader(c).ReadString('\n')
	return time.Since(start), err
}

// TestDelayCutHealAndSpike: a byte takes at least the delay each way; a
// spike lengthens it; a cut path forwards nothing (the caller times out,
// no refusal); after the heal a new connection goes through.
func TestDelayCutHealAndSpike(t *testing.T) {
	p, err := Start(echo(t), 30*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if d, err := roundTrip(c, 5*time.Second); err != nil || d < 60*time.Millisecond {
		t.Fatalf("round trip through a 30 ms proxy: %s, %v; want at least 60 ms", d, err)
	}
	p.SetDelay(150 * time.Millisecond)
	if d, err := roundTrip(c, 5*time.Second); err != nil || d < 300*time.Millisecond {
		t.Fatalf("round trip after a spike to 150 ms: %s, %v; want at least 300 ms", d, err)
	}
	p.SetDelay(10 * time.Millisecond)
	p.Cut()
	if d, err := roundTrip(c, 300*time.Millisecond); err == nil {
		t.Fatalf("a cut path answered in %s", d)
	}
	p.Heal()
	c2, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := roundTrip(c2, 5*time.Second); err != nil {
		t.Fatalf("after the heal: %v", err)
	}
}
