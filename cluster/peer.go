package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/rlnode/rlnode/internal/problem"
	"github.com/rlnode/rlnode/tlsconf"
)

// peerClient talks to other nodes' internal endpoints over pooled
// keep-alive connections.
type peerClient struct {
	token string
	// tls: peers are reached over HTTPS, whatever scheme an address names.
	tls    bool
	client *http.Client
	// tr, when tracing is on, carries the caller's trace to the peer.
	tr *tracer
}

func newPeerClient(token string, src *tlsconf.Source, rt http.RoundTripper) *peerClient {
	p := &peerClient{token: token, tls: src != nil}
	if rt != nil {
		p.client = &http.Client{Transport: rt}
		return p
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   false,
	}
	if src != nil {
		// Per connection, so a reloaded certificate or CA is used at once.
		tr.DialTLSContext = src.DialTLS
	}
	p.client = &http.Client{Transport: tr}
	return p
}

func (p *peerClient) close() { p.client.CloseIdleConnections() }

// BaseURL turns an advertised host:port (or a URL) into a base URL.
func BaseURL(addr string) string {
	if strings.HasPrefix(addr, "http://") || strings.HasPrefix(addr, "https://") {
		return strings.TrimRight(addr, "/")
	}
	return "http://" + addr
}

// HTTPError is a non-2xx answer from a peer, with the problem detail it
// sent. It matches (errors.Is) the cluster errors the peer named, so an
// operation run on the leader fails on the follower as it would have here.
type HTTPError struct {
	Status int
	Code   string
	Detail string
	// ServedBy is the node that answered, when it said.
	ServedBy string
	codes    []string
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("HTTP %d: %s", e.Status, e.Detail)
}

// Unwrap returns the cluster errors the peer named.
func (e *HTTPError) Unwrap() []error {
	var errs []error
	for _, c := range e.codes {
		if err := codeError(c); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

func (p *peerClient) do(ctx context.Context, method, url, contentType string, body []byte) (*http.Response, error) {
	return p.request(ctx, method, url, contentType, bytes.NewReader(body), int64(len(body)))
}

func (p *peerClient) request(ctx context.Context, method, url, contentType string, body io.Reader, size int64) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return nil, err
	}
	req.ContentLength = size
	if p.tls && req.URL.Scheme == "http" {
		req.URL.Scheme = "https"
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	p.tr.inject(ctx, req.Header)
	return p.client.Do(req)
}

// send sends one request and returns a 2xx answer; any other answer is an
// *HTTPError.
func (p *peerClient) send(ctx context.Context, method, url, contentType string, body io.Reader, size int64) (*http.Response, error) {
	resp, err := p.request(ctx, method, url, contentType, body, size)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return nil, decodeHTTPError(resp, b)
	}
	return resp, nil
}

// sendJSON sends in (if non-nil) as JSON and decodes a 2xx answer into out
// (if non-nil).
func (p *peerClient) sendJSON(ctx context.Context, method, url string, in, out any) error {
	var body []byte
	contentType := ""
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return err
		}
		contentType = "application/json"
	}
	resp, err := p.send(ctx, method, url, contentType, bytes.NewReader(body), int64(len(body)))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("read answer from %s: %w", url, err)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("decode answer from %s: %w", url, err)
		}
	}
	return nil
}

// getJSON fetches url and decodes a 2xx JSON answer into out, giving the
// peer at most 2 s.
func (p *peerClient) getJSON(ctx context.Context, url string, out any) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return p.sendJSON(ctx, http.MethodGet, url, nil, out)
}

// postJSON posts in as JSON and decodes a 2xx answer into out (if non-nil).
func (p *peerClient) postJSON(ctx context.Context, url string, in, out any) error {
	return p.sendJSON(ctx, http.MethodPost, url, in, out)
}

func decodeHTTPError(resp *http.Response, body []byte) error {
	e := &HTTPError{Status: resp.StatusCode, ServedBy: resp.Header.Get(HeaderServedBy)}
	if d, ok := problem.Decode(body); ok {
		e.Code, e.Detail, e.codes = d.Code, d.Detail, d.Errors
		if e.Detail == "" {
			e.Detail = d.Title
		}
	} else {
		e.Detail = strings.TrimSpace(string(body))
	}
	return e
}

// isDialError reports whether a request failed before anything was sent.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func decodeJSON(r io.Reader, v any) error {
	return json.NewDecoder(io.LimitReader(r, 1<<20)).Decode(v)
}
