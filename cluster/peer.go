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

	"github.com/rlnode/rlnode/tlsconf"
)

// Headers shared with the HTTP layer.
const (
	// HeaderForwarded marks a request one node sent to another, so a node
	// that is no longer leader answers instead of forwarding again.
	HeaderForwarded = "X-Rlnode-Forwarded"
	// HeaderServedBy names the node that decided a hit.
	HeaderServedBy = "X-Rlnode-Served-By"
	// HeaderDecided says how a check was decided: DecidedLocal (from a
	// lease the node holds) or DecidedLog.
	HeaderDecided = "X-Rlnode-Decided"
)

// peerClient talks to other nodes' HTTP APIs over pooled keep-alive
// connections.
type peerClient struct {
	token string
	// tls: peers are reached over HTTPS, whatever scheme an address names.
	tls    bool
	client *http.Client
	// forwarding marks requests with HeaderForwarded: set for a node passing
	// a request on to the leader, not for a joining node's first request
	// (which a follower must pass on).
	forwarding bool
}

func newPeerClient(token string, src *tlsconf.Source, rt http.RoundTripper) *peerClient {
	p := &peerClient{token: token, tls: src != nil, forwarding: true}
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

// HTTPError is a non-2xx answer from a peer, with the problem detail it sent.
type HTTPError struct {
	Status int
	Code   string
	Detail string
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("HTTP %d: %s", e.Status, e.Detail)
}

func (p *peerClient) do(ctx context.Context, method, url, contentType string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if p.tls && req.URL.Scheme == "http" {
		req.URL.Scheme = "https"
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if p.forwarding {
		req.Header.Set(HeaderForwarded, "1")
	}
	if p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	return p.client.Do(req)
}

// postJSON posts in as JSON and decodes a 2xx answer into out (if non-nil).
func (p *peerClient) postJSON(ctx context.Context, url string, in, out any) error {
	return p.sendJSON(ctx, http.MethodPost, url, in, out)
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
	resp, err := p.do(ctx, method, url, contentType, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("read answer from %s: %w", url, err)
	}
	if resp.StatusCode/100 != 2 {
		return decodeHTTPError(resp.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("decode answer from %s: %w", url, err)
		}
	}
	return nil
}

func decodeHTTPError(status int, body []byte) error {
	var prob struct {
		Detail string `json:"detail"`
		Title  string `json:"title"`
		Code   string `json:"code"`
	}
	e := &HTTPError{Status: status}
	if json.Unmarshal(body, &prob) == nil && (prob.Detail != "" || prob.Title != "") {
		e.Code, e.Detail = prob.Code, prob.Detail
		if e.Detail == "" {
			e.Detail = prob.Title
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
