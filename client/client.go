// Package client is rlnode's Go client: it asks a cluster for rate-limit
// decisions over the public HTTP API, follows the cluster as its members and
// leader change, and offers net/http middleware.
//
// It talks to rlnode the way any program would, over HTTP only:
//
//	c, err := client.New(client.Config{Addrs: []string{"10.0.0.1:8080", "10.0.0.2:8080"}})
//	res, err := c.Check(ctx, "api", "user-42", 1)
//	if err == nil && !res.Allowed { /* 429, retry after res.RetryAfter */ }
//
// Calls that certainly did not count (no leader, a node that could not be
// reached, a node that was not ready) are retried on the other nodes until
// Config.Timeout. A call whose outcome is unknown is never retried: it
// returns an error matching ErrOutcomeUnknown and the caller decides.
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config configures a Client.
type Config struct {
	// Addrs are some of the cluster's HTTP addresses (host:port or a URL);
	// the client learns the others from /v1/cluster/peers.
	Addrs []string
	// Token is the cluster token, sent as "Authorization: Bearer"; needed
	// for Reset when the cluster has one.
	Token string
	// Timeout bounds one call, retries included (default 2s). A context
	// deadline that is sooner wins.
	Timeout time.Duration
	// TLS, when set, makes the client speak HTTPS to every node.
	TLS *tls.Config
	// RefreshInterval is how often the member list is re-read from the
	// cluster while calls succeed (default 30s; it is also re-read after any
	// failure).
	RefreshInterval time.Duration
	// Transport replaces the client's own pooled transport (tests, proxies).
	Transport http.RoundTripper
}

// Client is safe for concurrent use; make one per process and reuse it so
// connections are reused.
type Client struct {
	cfg    Config
	scheme string
	http   *http.Client

	mu        sync.Mutex
	seeds     []string
	members   []string // host:port, leader first when known
	next      int      // index of the member to try first
	refreshed time.Time
}

// New checks the configuration; it does not contact the cluster.
func New(cfg Config) (*Client, error) {
	if len(cfg.Addrs) == 0 {
		return nil, errors.New("rlnode client: Config.Addrs is empty: give at least one node's HTTP address")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("rlnode client: Config.Timeout %s is negative", cfg.Timeout)
	}
	if cfg.RefreshInterval == 0 {
		cfg.RefreshInterval = 30 * time.Second
	}
	scheme := "http"
	if cfg.TLS != nil {
		scheme = "https"
	}
	var seeds []string
	for _, a := range cfg.Addrs {
		a = strings.TrimRight(strings.TrimSpace(a), "/")
		if s, rest, ok := strings.Cut(a, "://"); ok {
			if s == "https" {
				scheme = "https"
			}
			a = rest
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("rlnode client: address %q: want host:port or http(s)://host:port", a)
		}
		seeds = append(seeds, a)
	}
	rt := cfg.Transport
	if rt == nil {
		rt = &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSClientConfig:     cfg.TLS,
			MaxIdleConns:        256,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     90 * time.Second,
			ForceAttemptHTTP2:   cfg.TLS != nil,
		}
	}
	return &Client{cfg: cfg, scheme: scheme, http: &http.Client{Transport: rt}, seeds: seeds, members: append([]string(nil), seeds...)}, nil
}

// Close releases idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// Members returns the node addresses the client currently knows, the one it
// will try first at the front.
func (c *Client) Members() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.members))
	for i := range c.members {
		out = append(out, c.members[(c.next+i)%len(c.members)])
	}
	return out
}

// worked remembers a node that answered, so the next call starts there.
func (c *Client) worked(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, m := range c.members {
		if m == addr {
			c.next = i
			return
		}
	}
}

type peer struct {
	HTTPAddr string `json:"httpAddr"`
	Leader   bool   `json:"leader"`
}

// refresh re-reads the member list from the first node that answers and puts
// the leader first (a check sent to the leader is not forwarded). force
// skips the interval.
func (c *Client) refresh(ctx context.Context, force bool) {
	c.mu.Lock()
	if !force && time.Since(c.refreshed) < c.cfg.RefreshInterval {
		c.mu.Unlock()
		return
	}
	if force && time.Since(c.refreshed) < 50*time.Millisecond {
		c.mu.Unlock()
		return
	}
	c.refreshed = time.Now()
	ask := append(append([]string(nil), c.members...), c.seeds...)
	c.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, min(c.cfg.Timeout, time.Second))
	defer cancel()
	for _, addr := range ask {
		var peers []peer
		if err := c.getJSON(ctx, addr, "/v1/cluster/peers", &peers); err != nil || len(peers) == 0 {
			continue
		}
		members := make([]string, 0, len(peers))
		for _, p := range peers {
			if p.HTTPAddr == "" {
				continue
			}
			if p.Leader {
				members = append([]string{p.HTTPAddr}, members...)
			} else {
				members = append(members, p.HTTPAddr)
			}
		}
		if len(members) == 0 {
			continue
		}
		c.mu.Lock()
		c.members, c.next = members, 0
		c.mu.Unlock()
		return
	}
}

func (c *Client) getJSON(ctx context.Context, addr, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.scheme+"://"+addr+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return fmt.Errorf("%s%s: HTTP %d", addr, path, resp.StatusCode)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out)
}

// answer is one node's HTTP answer.
type answer struct {
	node   string
	status int
	header http.Header
	body   []byte
}

// call sends one request, retrying on other nodes while the failure
// certainly did not count. ok lists the statuses that carry a decision.
//
// A node that could not be reached is tried again (with backoff) until the
// timeout; a node that answered "not counted" or "no leader" has already
// waited for a leader itself, so it is not asked again in this call, and the
// call ends once every known node has said so.
func (c *Client) call(ctx context.Context, method, path string, body []byte, ok ...int) (answer, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	c.refresh(ctx, false)
	backoff := 10 * time.Millisecond
	answered := map[string]error{}
	var last error
	for round := 0; ; round++ {
		members := c.Members()
		for _, addr := range members {
			if answered[addr] != nil {
				continue
			}
			a, err := c.once(ctx, addr, method, path, body, ok)
			if err == nil {
				c.worked(addr)
				return a, nil
			}
			if !retryable(err) {
				return a, err
			}
			if e := (*Error)(nil); errors.As(err, &e) && e.Status != 0 {
				answered[addr] = err
			}
			last = err
			if ctx.Err() != nil {
				return a, c.worst(answered, last)
			}
		}
		c.refresh(ctx, true)
		if len(answered) >= len(c.Members()) {
			return answer{}, c.worst(answered, last)
		}
		select {
		case <-ctx.Done():
			return answer{}, c.worst(answered, last)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// worst picks the error to report when no node decided: a node's own answer
// says more than a connection error.
func (c *Client) worst(answered map[string]error, last error) error {
	for _, addr := range c.Members() {
		if err := answered[addr]; err != nil && errors.Is(err, ErrNoLeader) {
			return err
		}
	}
	for _, err := range answered {
		return err
	}
	return last
}

// once sends one request to one node and classifies the outcome.
func (c *Client) once(ctx context.Context, addr, method, path string, body []byte, ok []int) (answer, error) {
	a := answer{node: addr}
	req, err := http.NewRequestWithContext(ctx, method, c.scheme+"://"+addr+path, nil)
	if err != nil {
		return a, &Error{Node: addr, kind: ErrInvalid, cause: err}
	}
	// A counting request must never be replayed by net/http on a broken
	// keep-alive connection (it replays GETs it thinks idempotent): that
	// could count a hit twice. A body it cannot rewind turns that off.
	if body != nil {
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		req.Header.Set("Content-Type", "application/json")
	} else if method != http.MethodGet || strings.HasPrefix(path, "/check") {
		req.Body = noReplay{}
	}
	req.Header.Set("Accept", "application/json")
	if c.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	}
	var wrote bool
	req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) { wrote = wrote || i.Err == nil },
	}))
	resp, err := c.http.Do(req)
	if err != nil {
		var remote *net.OpError
		var verify *tls.CertificateVerificationError
		if errors.As(err, &remote) && remote.Op == "remote error" || errors.As(err, &verify) {
			// The TLS handshake failed: the node sent an alert (with TLS 1.3
			// its verdict on our certificate arrives after the request
			// left) or its certificate is not trusted. The node never read
			// the request, and another node would answer the same.
			return a, &Error{Node: addr, kind: ErrUnauthorized, cause: err}
		}
		if !wrote {
			// Nothing reached the node: not counted, try another.
			return a, &Error{Node: addr, kind: ErrNotCounted, cause: err}
		}
		return a, &Error{Node: addr, kind: ErrOutcomeUnknown, cause: err}
	}
	defer resp.Body.Close()
	a.status, a.header = resp.StatusCode, resp.Header
	a.body, err = io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return a, &Error{Node: addr, Status: resp.StatusCode, kind: ErrOutcomeUnknown, cause: fmt.Errorf("read answer: %w", err)}
	}
	for _, s := range ok {
		if resp.StatusCode == s {
			return a, nil
		}
	}
	return a, problemError(a)
}

// noReplay is an empty request body net/http cannot rewind.
type noReplay struct{}

func (noReplay) Read([]byte) (int, error) { return 0, io.EOF }
func (noReplay) Close() error             { return nil }

func problemError(a answer) *Error {
	var p struct {
		Code   string `json:"code"`
		Detail string `json:"detail"`
		Title  string `json:"title"`
	}
	e := &Error{Node: a.node, Status: a.status}
	if json.Unmarshal(a.body, &p) == nil {
		e.Code, e.Detail = p.Code, p.Detail
		if e.Detail == "" {
			e.Detail = p.Title
		}
	} else {
		e.Detail = strings.TrimSpace(string(a.body))
		if len(e.Detail) > 200 {
			e.Detail = e.Detail[:200]
		}
	}
	if s := a.header.Get("Retry-After"); s != "" {
		if n, err := strconv.Atoi(s); err == nil {
			e.RetryAfter = time.Duration(n) * time.Second
		}
	}
	e.kind = kindFor(a.status, e.Code)
	return e
}
