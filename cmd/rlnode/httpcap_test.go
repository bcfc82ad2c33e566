package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// idleConns opens n keep-alive connections from the loopback address
// from, makes one request on each and leaves it idle. A connection the
// node closed or never answered is closed here and not returned.
func idleConns(t *testing.T, httpAddr, from string, n int) []net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	var held []net.Conn
	for range n {
		c, err := d.Dial("tcp", httpAddr)
		if err != nil {
			continue
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := io.WriteString(c, "GET /livez HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			c.Close()
			continue
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			c.Close()
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		c.SetDeadline(time.Time{})
		held = append(held, c)
	}
	return held
}

// stillOpen counts the connections the node has not closed.
func stillOpen(conns []net.Conn) int {
	open := 0
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			open++
		}
	}
	return open
}

// checkFrom is GET /check/client from the loopback address from.
func checkFrom(n *proctest.Node, from, client string) (proctest.Response, error) {
	c := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{
		DialContext:       (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}).DialContext,
		DisableKeepAlives: true,
	}}
	return proctest.DoWith(c, "GET", n.URL()+"/check/"+client, "", nil)
}

// One address cannot take the HTTP port: it keeps at most its cap of idle
// keep-alive connections (the node closes its oldest idle ones), and when
// many addresses together fill the port, idle connections are closed to
// answer a new one.
func TestHTTPPortPerAddressCapAndIdleFirst(t *testing.T) {
	if ln, err := net.Listen("tcp", "127.0.0.2:0"); err != nil {
		t.Skipf("no 127.0.0.2 on this machine: %v", err)
	} else {
		ln.Close()
	}
	const total, perIP = 64, 16
	n := proctest.StartNode(t, rlnodeBin, "cap", "--http-max-conns", fmt.Sprint(total), "--http-max-conns-per-ip", fmt.Sprint(perIP))
	proctest.WaitReady(t, n, 15*time.Second)

	hog := idleConns(t, n.HTTPAddr, "127.0.0.2", total)
	if open := stillOpen(hog); open > perIP {
		t.Fatalf("127.0.0.2 holds %d idle connections, want at most its cap %d", open, perIP)
	}
	if r, err := checkFrom(n, "127.0.0.3", "alice"); err != nil || r.Status != 200 {
		t.Fatalf("another address while 127.0.0.2 holds its cap: %v %d %s", err, r.Status, r.Raw)
	}

	// Five addresses at their cap are more than the port holds.
	for i := 4; i <= 8; i++ {
		idleConns(t, n.HTTPAddr, fmt.Sprintf("127.0.0.%d", i), perIP)
	}
	if r, err := checkFrom(n, "127.0.0.9", "bob"); err != nil || r.Status != 200 {
		t.Fatalf("a new address with the port full of idle connections: %v %d %s", err, r.Status, r.Raw)
	}
	if r := proctest.MustGet(t, n.URL()+"/readyz"); r.Status != 200 {
		t.Fatalf("node after the flood: %d %s", r.Status, r.Raw)
	}
}
