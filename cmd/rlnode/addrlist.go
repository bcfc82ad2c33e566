package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"time"
)

// An --addr list is tried in order; a node that cannot be reached is
// passed over at once (the request never left). A node that takes the
// connection and answers nothing (a stopped process, a frozen machine:
// the kernel still accepts) held the whole --timeout (30 s) before: now
// a node that is not the list's last is asked after attemptPatience
// whether it is alive at all (GET /livez, livenessTimeout); one that does
// not answer that either is passed over too. A node that is alive but slow
// (a join waiting for catch-up) keeps the command's whole timeout. The
// last node always does: there is nowhere else to go.
const (
	attemptPatience = 2 * time.Second
	livenessTimeout = time.Second
)

// hungError is a node of --addr that took a request and answered nothing,
// not even its liveness probe.
type hungError struct{ method, url string }

func (e *hungError) Error() string {
	return fmt.Sprintf("%s %s: the node took the connection but answered nothing for %s, nor GET /livez within %s (a stopped or frozen process?)",
		e.method, e.url, attemptPatience, livenessTimeout)
}

// passedOver reports an error after which the next node of --addr is
// tried: the request never reached a node, or reached one that is hung.
func passedOver(err error) bool {
	var hung *hungError
	return isUnreachable(err) || errors.As(err, &hung)
}

// checkAddrs refuses an --addr entry with a scheme other than http or
// https before anything is sent (a name is never looked up for it).
func checkAddrs(addrs []string) error {
	for _, addr := range addrs {
		scheme, _, ok := strings.Cut(addr, "://")
		if !ok {
			continue
		}
		if s := strings.ToLower(scheme); s != "http" && s != "https" {
			return usageErr("--addr (or $%s) entry %q: rlnode nodes speak http:// or https://, not %s://; give host:port or an http(s) URL", envAddr, addr, scheme)
		}
	}
	return nil
}

// attempt sends one request to the node at addr, giving up on a node that
// is hung when it is not the list's last (see attemptPatience).
func (a *adminFlags) attempt(ctx context.Context, addr, method, url string, hdr http.Header, body io.Reader, size int64, last bool) (*http.Response, error) {
	if last {
		return a.sendTo(ctx, method, url, hdr, body, size)
	}
	actx, cancel := context.WithCancel(ctx)
	type result struct {
		resp *http.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := a.sendTo(actx, method, url, hdr, body, size)
		done <- result{resp, err}
	}()
	finish := func(r result) (*http.Response, error) {
		if r.err != nil {
			cancel()
			return nil, r.err
		}
		r.resp.Body = &cancelOnClose{ReadCloser: r.resp.Body, cancel: cancel}
		return r.resp, nil
	}
	patience := time.NewTimer(attemptPatience)
	defer patience.Stop()
	select {
	case r := <-done:
		return finish(r)
	case <-patience.C:
	}
	if a.alive(ctx, addr) {
		return finish(<-done)
	}
	cancel()
	if r := <-done; r.err == nil {
		return finish(r) // it answered after all, just now
	}
	return nil, &hungError{method: method, url: url}
}

// alive reports whether the node at addr answers GET /livez in time.
func (a *adminFlags) alive(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, livenessTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.url(addr, "/livez"), nil)
	if err != nil {
		return false
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return true
}

// cancelOnClose ends an attempt's context when its answer is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// wrongPortHint says what an error of a request that reached something
// other than an HTTP API most likely means. In plain text the Raft and
// gRPC ports answer an HTTP request themselves (internal/wrongport); over
// TLS, or from releases before that, the Raft port closes the connection
// (Go reports "EOF", a reset or "server closed idle connection"), a gRPC
// port refuses the TLS handshake of a client that does not ask for HTTP/2
// (EOF too), and a gRPC port in plain text sends HTTP/2 frames, which Go
// reports as a malformed HTTP response (or version).
func wrongPortHint(err error) string {
	msg := err.Error()
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		msg == "EOF" || strings.HasSuffix(msg, ": EOF") || strings.Contains(msg, "server closed idle connection"):
		return "the connection closed without an answer: unless the node just stopped, --addr names a port that is not the HTTP API, " +
			"such as rlnode's Raft port (--raft-addr) or, over TLS, a gRPC port (--grpc-addr, --rlqs-addr); " +
			"the HTTP API is on the node's --http-addr (8080 by default)"
	case strings.Contains(msg, "malformed HTTP") && strings.Contains(msg, `"\x00\x00`):
		return "the answer is HTTP/2 frames: this is a gRPC port (rlnode's --grpc-addr or --rlqs-addr, for Envoy), not the HTTP API; " +
			"give the node's --http-addr (8080 by default)"
	}
	return ""
}
