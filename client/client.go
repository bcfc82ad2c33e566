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
// Config.Timeout. A call whose outcome a node reported as unknown (it
// answered so, or the connection broke after the request left) is never
// retried: it returns an error matching ErrOutcomeUnknown and the caller
// decides.
//
// A node that answers nothing within Config.AttemptTimeout (default 300ms:
// a stopped process, a frozen VM) is skipped for the next node, and later
// calls leave it alone until it answers a probe of its /livez again (Close
// stops the probes). A check such a node later decides too counts twice,
// and a grant it made lapses unspent: under-admission, never over. The
// last node left to try keeps the call's whole time.
//
// The Client keeps idle keep-alive connections for up to 512 parallel
// callers per node; make one Client per process and share it.
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
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlnode/rlnode/internal/problem"
	"github.com/rlnode/rlnode/internal/wire"
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
	// AttemptTimeout bounds how long one node may take to answer one
	// attempt while another node is left to try (default 300ms, well
	// under Timeout; negative: no bound but Timeout). A node that did not
	// answer in time, or refused the connection, is skipped by later
	// calls until it answers a probe again. A check sent to a node that
	// then hung may count there as well as on the node that answered: the
	// safe side. Keep it above the slowest healthy answer.
	AttemptTimeout time.Duration
	// Transport replaces the client's own pooled transport (tests, proxies).
	Transport http.RoundTripper
}

// Client is safe for concurrent use; make one per process and reuse it so
// connections are reused.
type Client struct {
	cfg    Config
	scheme string
	http   *http.Client
	health *health
	auth   []string // the Authorization header's value, nil without a token

	mu        sync.Mutex
	seeds     []string
	members   []string // host:port, leader first when known
	next      int      // index of the member to try first
	ordered   []string // members from next on (order), nil when stale
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
	if cfg.AttemptTimeout == 0 {
		cfg.AttemptTimeout = DefaultAttemptTimeout
	}
	if cfg.AttemptTimeout >= cfg.Timeout {
		// One attempt may take the whole call.
		cfg.AttemptTimeout = -1
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
			Proxy:           nil,
			DialContext:     (&net.Dialer{Timeout: time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSClientConfig: cfg.TLS,
			// Every caller in flight holds a connection: keep as many
			// idle as parallel callers use, or each burst past the idle
			// cap dials (and later closes) connections of its own.
			MaxIdleConns:        1024,
			MaxIdleConnsPerHost: 512,
			IdleConnTimeout:     90 * time.Second,
			// Answers are a few hundred bytes and never compressed: no
			// Accept-Encoding to send, no gzip check per answer.
			DisableCompression: true,
			ForceAttemptHTTP2:  cfg.TLS != nil,
		}
	}
	c := &Client{cfg: cfg, scheme: scheme, http: &http.Client{Transport: rt}, health: newHealth(),
		seeds: seeds, members: append([]string(nil), seeds...)}
	if cfg.Token != "" {
		c.auth = []string{"Bearer " + cfg.Token}
	}
	return c, nil
}

// Close stops the probes of nodes that did not answer and releases idle
// connections.
func (c *Client) Close() {
	c.health.close()
	c.http.CloseIdleConnections()
}

// Members returns the node addresses the client currently knows, the one it
// will try first at the front.
func (c *Client) Members() []string { return slices.Clone(c.order()) }

// order is Members without the copy: the caller must not change it. It is
// rebuilt only when the members or the first one change, so a call costs
// no allocation here.
func (c *Client) order() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ordered == nil {
		c.ordered = make([]string, 0, len(c.members))
		for i := range c.members {
			c.ordered = append(c.ordered, c.members[(c.next+i)%len(c.members)])
		}
	}
	return c.ordered
}

// worked remembers a node that answered, so the next call starts there.
func (c *Client) worked(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.members) > 0 && c.members[c.next] == addr {
		return
	}
	for i, m := range c.members {
		if m == addr {
			c.next, c.ordered = i, nil
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
	// Nodes that did not answer lately are asked last.
	var up, down []string
	for _, addr := range ask {
		if c.health.isDown(addr) {
			down = append(down, addr)
		} else {
			up = append(up, addr)
		}
	}
	for _, addr := range append(up, down...) {
		var peers []peer
		actx, acancel := c.attemptContext(ctx)
		err := c.getJSON(actx, addr, wire.PeersPath, &peers)
		acancel()
		if err != nil || len(peers) == 0 {
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
		c.members, c.next, c.ordered = members, 0, nil
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
// timeout, once it answers a probe (endpoints.go); a node that answered
// "not counted" or "no leader" has already waited for a leader itself, so
// it is not asked again in this call, and the call ends once every known
// node has said so. A node that took the request but did not answer within
// AttemptTimeout, while another node is left to try, is skipped for the
// next one: if it wakes up and decides the request too, a hit counts twice
// (under-admission, never over) and a grant's units lapse unspent (the
// same).
func (c *Client) call(ctx context.Context, method, path string, body []byte, ok ...int) (answer, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	c.refresh(ctx, false)
	backoff := 10 * time.Millisecond
	var answered map[string]error
	var last, unknown error
	for {
		try := c.candidates(answered)
		if len(try) == 0 {
			return answer{}, c.worst(answered, unknown, last)
		}
		for i, addr := range try {
			// The last node left in a round may take the call's whole
			// time: with nowhere else to go, a slow answer (a node
			// waiting for an election) beats none.
			a, err := c.once(ctx, addr, method, path, body, ok, i < len(try)-1)
			if err == nil {
				c.worked(addr)
				return a, nil
			}
			var e *Error
			errors.As(err, &e)
			switch {
			case e != nil && e.hung:
				if e.kind == ErrOutcomeUnknown {
					unknown = err
				}
			case !retryable(err):
				return a, err
			case e != nil && e.Status != 0:
				if answered == nil {
					answered = map[string]error{}
				}
				answered[addr] = err
			}
			last = err
			if ctx.Err() != nil {
				return a, c.worst(answered, unknown, last)
			}
		}
		c.refresh(ctx, true)
		if len(answered) >= len(c.order()) {
			return answer{}, c.worst(answered, unknown, last)
		}
		select {
		case <-ctx.Done():
			return answer{}, c.worst(answered, unknown, last)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// worst picks the error to report when no node decided: a request a node
// took and never answered may still count there; else a node's own answer
// says more than a connection error.
func (c *Client) worst(answered map[string]error, unknown, last error) error {
	if unknown != nil {
		return unknown
	}
	for _, addr := range c.order() {
		if err := answered[addr]; err != nil && errors.Is(err, ErrNoLeader) {
			return err
		}
	}
	for _, err := range answered {
		return err
	}
	return last
}

// once sends one request to one node, within the attempt budget when
// bounded, and classifies the outcome.
func (c *Client) once(ctx context.Context, addr, method, path string, body []byte, ok []int, bounded bool) (answer, error) {
	a := answer{node: addr}
	actx, cancel := ctx, context.CancelFunc(func() {})
	if bounded {
		actx, cancel = c.attemptContext(ctx)
	}
	defer cancel()
	var sent atomic.Bool // set by the transport's writer goroutine
	actx = httptrace.WithClientTrace(actx, &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err == nil {
				sent.Store(true)
			}
		},
	})
	req, err := http.NewRequestWithContext(actx, method, c.scheme+"://"+addr+path, nil)
	if err != nil {
		return a, &Error{Node: addr, kind: ErrInvalid, cause: err}
	}
	// A counting request must never be replayed by net/http on a broken
	// keep-alive connection (it replays GETs it thinks idempotent): that
	// could count a hit twice. A body it cannot rewind turns that off.
	if body != nil {
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		req.Header["Content-Type"] = acceptJSON
	} else if method != http.MethodGet || strings.HasPrefix(path, wire.CheckPath) {
		req.Body = noReplay{}
	}
	// Canonical keys set directly: no canonicalizing per call; the value
	// slices are shared and never changed.
	req.Header["Accept"] = acceptJSON
	if c.auth != nil {
		req.Header["Authorization"] = c.auth
	}
	resp, err := c.http.Do(req)
	wrote := sent.Load()
	if err != nil {
		var remote *net.OpError
		var verify *tls.CertificateVerificationError
		switch {
		case errors.As(err, &remote) && remote.Op == "remote error" || errors.As(err, &verify):
			// The TLS handshake failed: the node sent an alert (with TLS 1.3
			// its verdict on our certificate arrives after the request
			// left) or its certificate is not trusted. The node never read
			// the request, and another node would answer the same.
			return a, &Error{Node: addr, kind: ErrUnauthorized, cause: err}
		case c.hung(ctx, actx):
			return a, c.hungError(addr, wrote, err)
		case !wrote:
			// Nothing reached the node: not counted, try another; skip
			// it until it answers again.
			c.health.markDown(addr, c.probe)
			return a, &Error{Node: addr, kind: ErrNotCounted, cause: err}
		}
		return a, &Error{Node: addr, kind: ErrOutcomeUnknown, cause: err}
	}
	defer resp.Body.Close()
	a.status, a.header = resp.StatusCode, resp.Header
	a.body, err = readAnswer(resp)
	if err != nil {
		if c.hung(ctx, actx) {
			return a, c.hungError(addr, true, err)
		}
		return a, &Error{Node: addr, Status: resp.StatusCode, kind: ErrOutcomeUnknown, cause: fmt.Errorf("read answer: %w", err)}
	}
	if c.health.anyDown() {
		c.health.markUp(addr)
	}
	for _, s := range ok {
		if resp.StatusCode == s {
			return a, nil
		}
	}
	return a, problemError(a)
}

// hung reports whether an attempt ran out of its own budget while the
// call still had time: the node did not answer.
func (c *Client) hung(call, attempt context.Context) bool {
	return call.Err() == nil && errors.Is(attempt.Err(), context.DeadlineExceeded)
}

// hungError marks addr down and says what became of the request: not
// counted if it never left, else unknown on that node (the call goes on
// to the next node all the same).
func (c *Client) hungError(addr string, wrote bool, err error) *Error {
	c.health.markDown(addr, c.probe)
	kind := ErrNotCounted
	if wrote {
		kind = ErrOutcomeUnknown
	}
	return &Error{Node: addr, kind: kind, hung: true,
		cause: fmt.Errorf("no answer within the attempt budget of %s: %w", c.cfg.AttemptTimeout, err)}
}

var acceptJSON = []string{"application/json"}

// maxAnswer bounds an answer's body.
const maxAnswer = 4 << 20

// readAnswer reads an answer's body, in one allocation of its size when
// the node sent a Content-Length (every rlnode answer does).
func readAnswer(resp *http.Response) ([]byte, error) {
	if n := resp.ContentLength; n >= 0 && n <= maxAnswer {
		b := make([]byte, n)
		_, err := io.ReadFull(resp.Body, b)
		return b, err
	}
	return io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
}

// noReplay is an empty request body net/http cannot rewind.
type noReplay struct{}

func (noReplay) Read([]byte) (int, error) { return 0, io.EOF }
func (noReplay) Close() error             { return nil }

func problemError(a answer) *Error {
	var p problem.Doc // the one problem document every endpoint answers
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
