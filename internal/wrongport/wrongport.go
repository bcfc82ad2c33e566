// Package wrongport answers a client that dialled the wrong port of a
// node, instead of leaving it with "EOF", a "malformed HTTP response" of
// HTTP/2 frames, or a gRPC call that hangs: an HTTP/1 request on the Raft
// or a gRPC port gets a plain-text HTTP/1.1 400 saying which port it
// reached and where the HTTP API is; a gRPC client (an HTTP/2 preface) on
// the HTTP port gets every call it starts refused with a gRPC status
// saying the same. Only the first bytes of a connection are looked at,
// within the read deadline the server set; anything else passes through
// untouched.
package wrongport

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// ErrAnswered is what the server reading a connection this package has
// answered gets: the connection is done.
var ErrAnswered = errors.New("wrongport: a client of another protocol was answered and the connection closed")

// http1Methods are the request lines an HTTP/1 client starts with.
var http1Methods = []string{"GET ", "POST ", "PUT ", "DELETE ", "HEAD ", "OPTIONS ", "PATCH ", "CONNECT ", "TRACE "}

// h2Preface starts every HTTP/2 (so every plain-text gRPC) connection.
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// sniffLen is how many first bytes decide: the longest method above, or
// the preface.
const sniffLen = len(h2Preface)

// IsHTTP1 reports whether b is the start of an HTTP/1 request line.
func IsHTTP1(b []byte) bool {
	for _, m := range http1Methods {
		if bytes.HasPrefix(b, []byte(m)) {
			return true
		}
	}
	return false
}

// couldBe reports whether more bytes could still make b one of prefixes.
func couldBe(b []byte, prefixes []string) bool {
	for _, p := range prefixes {
		n := min(len(b), len(p))
		if bytes.Equal(b[:n], []byte(p[:n])) {
			return true
		}
	}
	return false
}

// Peek reads the first bytes of c until they are an HTTP/1 request line,
// the HTTP/2 preface, or can no longer become either (a Raft RPC or a TLS
// ClientHello shows that in one byte), within c's read deadline. It
// returns them and a connection that reads them again first.
func Peek(c net.Conn) (net.Conn, []byte, error) {
	buf := make([]byte, 0, sniffLen)
	prefixes := append([]string{h2Preface}, http1Methods...)
	for len(buf) < sniffLen && couldBe(buf, prefixes) && !IsHTTP1(buf) {
		n, err := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil {
			return &replayConn{Conn: c, head: buf}, buf, err
		}
	}
	return &replayConn{Conn: c, head: buf}, buf, nil
}

// replayConn reads head before the rest of Conn.
type replayConn struct {
	net.Conn
	head []byte
}

func (r *replayConn) Read(p []byte) (int, error) {
	if len(r.head) > 0 {
		n := copy(p, r.head)
		r.head = r.head[n:]
		return n, nil
	}
	return r.Conn.Read(p)
}

// AnswerHTTP1 writes a plain-text 400 carrying msg, for an HTTP/1 client
// on a port that is not HTTP, and closes c.
func AnswerHTTP1(c net.Conn, msg string) {
	body := msg + "\n"
	c.SetWriteDeadline(time.Now().Add(time.Second))
	fmt.Fprintf(c, "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	c.Close()
}

// RefuseHTTP1 wraps a listener of a port that is not HTTP (a gRPC port):
// a connection whose first bytes are an HTTP/1 request is answered with
// msg (AnswerHTTP1) when its server first reads it.
func RefuseHTTP1(ln net.Listener, msg string) net.Listener {
	return &listener{Listener: ln, sniff: refuseHTTP1(msg)}
}

// SniffHTTP1 is RefuseHTTP1 for one connection c of a server that reads
// before it writes (Raft): its first Read answers an HTTP/1 client with
// msg (and fails with ErrAnswered); writes never wait for it.
func SniffHTTP1(c net.Conn, msg string) net.Conn {
	return &sniffConn{Conn: c, sniff: refuseHTTP1(msg), readsFirst: true}
}

func refuseHTTP1(msg string) func(net.Conn) (net.Conn, error) {
	return func(c net.Conn) (net.Conn, error) {
		pc, head, err := Peek(c)
		if err == nil && IsHTTP1(head) {
			AnswerHTTP1(c, msg)
			return nil, ErrAnswered
		}
		return pc, err
	}
}

// RefuseGRPC wraps the HTTP port's listener: a connection that starts
// with the HTTP/2 preface (a plain-text gRPC client: HTTP/1.1 is the
// port's only plain-text protocol) has every call it starts refused with
// gRPC status UNIMPLEMENTED and msg, then is closed (refuseGRPC).
func RefuseGRPC(ln net.Listener, msg string) net.Listener {
	return &listener{Listener: ln, sniff: func(c net.Conn) (net.Conn, error) {
		pc, head, err := Peek(c)
		if err == nil && bytes.Equal(head, []byte(h2Preface)) {
			refuseGRPC(c, msg)
			return nil, ErrAnswered
		}
		return pc, err
	}}
}

// listener hands out connections that sniff on their first read, in the
// server's own goroutine for the connection and under its deadline, so
// Accept never waits on a client.
type listener struct {
	net.Listener
	sniff func(net.Conn) (net.Conn, error)
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &sniffConn{Conn: c, sniff: l.sniff}, nil
}

// sniffConn runs sniff before its first Read or Write; later reads go to
// what sniff returned.
type sniffConn struct {
	net.Conn
	sniff func(net.Conn) (net.Conn, error)
	// readsFirst: only a Read sniffs (the server never writes before it
	// has read, and a write must not wait for the client).
	readsFirst bool
	once       sync.Once
	r          io.Reader
	err        error
}

// sniffed runs sniff once, on the connection's first Read or Write: a
// gRPC server writes its SETTINGS before it reads the client's preface,
// and an HTTP/1 client must get the plain-text answer, not those frames.
func (s *sniffConn) sniffed() {
	s.once.Do(func() {
		var c net.Conn
		c, s.err = s.sniff(s.Conn)
		if c != nil {
			s.r = c
		}
	})
}

func (s *sniffConn) Write(p []byte) (int, error) {
	if s.readsFirst {
		return s.Conn.Write(p)
	}
	s.sniffed()
	if s.r == nil {
		return 0, s.err
	}
	return s.Conn.Write(p)
}

func (s *sniffConn) Read(p []byte) (int, error) {
	s.sniffed()
	if s.r == nil {
		return 0, s.err
	}
	n, err := s.r.Read(p)
	if n == 0 && err == nil && s.err != nil {
		return 0, s.err
	}
	return n, err
}
