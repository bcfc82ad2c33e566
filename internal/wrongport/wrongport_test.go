package wrongport

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// serve accepts on a loopback listener wrapped by RefuseHTTP1 and echoes
// what each connection's server reads (as a gRPC or Raft server would
// read it) back to it.
func serve(t *testing.T) string {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := RefuseHTTP1(raw, "this is not HTTP")
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				io.Copy(c, c)
			}()
		}
	}()
	return raw.Addr().String()
}

// An HTTP/1 client is answered; any other protocol's bytes reach the
// server untouched, however they are split.
func TestRefuseHTTP1(t *testing.T) {
	addr := serve(t)
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || strings.TrimSpace(string(b)) != "this is not HTTP" {
		t.Fatalf("an HTTP/1 request: %d %q", resp.StatusCode, b)
	}
	for _, parts := range [][]string{{"\x00raft rpc"}, {"P", "RI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "frames"}, {"GE", "T-not-a-method"}} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		want := strings.Join(parts, "")
		for _, p := range parts {
			c.Write([]byte(p))
			time.Sleep(10 * time.Millisecond)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got := make([]byte, len(want))
		if _, err := io.ReadFull(bufio.NewReader(c), got); err != nil || string(got) != want {
			t.Errorf("%q sent in parts: echoed %q, %v", want, got, err)
		}
		c.Close()
	}
}
