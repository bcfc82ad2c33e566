package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// KeyFunc names the caller a request is counted against. An error answers
// 400 (the request cannot be attributed).
type KeyFunc func(*http.Request) (string, error)

// CostFunc says what a request costs (>= 1).
type CostFunc func(*http.Request) (int64, error)

// KeyHeader keys requests by a header (e.g. an API key); a request without
// it gets 400.
func KeyHeader(name string) KeyFunc {
	return func(r *http.Request) (string, error) {
		if v := r.Header.Get(name); v != "" {
			return v, nil
		}
		return "", fmt.Errorf("header %s is missing", name)
	}
}

// KeyRemoteIP keys requests by the connection's peer address. Behind a
// proxy that is the proxy: use a KeyFunc that reads the header your proxy
// sets instead.
func KeyRemoteIP(r *http.Request) (string, error) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr, nil
	}
	return host, nil
}

// FailMode says what the middleware does when the cluster gives no decision
// (unreachable, no leader, outcome unknown).
type FailMode int

const (
	// FailClosed answers 503 with Retry-After: nothing passes unchecked.
	// The default.
	FailClosed FailMode = iota
	// FailOpen lets the request through without rate-limit headers.
	FailOpen
)

// Option configures Middleware.
type Option func(*Limiter)

// WithCost sets the cost of each request (default 1).
func WithCost(f CostFunc) Option { return func(l *Limiter) { l.cost = f } }

// WithFailMode chooses fail-open or fail-closed (default FailClosed).
func WithFailMode(m FailMode) Option { return func(l *Limiter) { l.fail = m } }

// WithErrorHook is called with every error that left a request without a
// decision (for logs and metrics), before the fail mode applies.
func WithErrorHook(f func(*http.Request, error)) Option { return func(l *Limiter) { l.onError = f } }

// WithLocal decides requests through l: hot keys from units leased to
// this process, the rest by a remote check (see Local). The fail mode
// applies when neither gave a decision.
func WithLocal(l *Local) Option { return func(li *Limiter) { li.local = l } }

// Limiter decides requests for a middleware. Gin and other routers call
// Admit directly.
type Limiter struct {
	c       *Client
	policy  string
	key     KeyFunc
	cost    CostFunc
	fail    FailMode
	onError func(*http.Request, error)
	local   *Local
}

// NewLimiter builds the decision step Middleware wraps around a handler.
func NewLimiter(c *Client, policy string, key KeyFunc, opts ...Option) *Limiter {
	l := &Limiter{c: c, policy: policy, key: key, fail: FailClosed}
	for _, o := range opts {
		o(l)
	}
	return l
}

// Middleware rate-limits next: each request counts one hit (or its cost)
// for keyFunc's key under policy. Every decided response carries the
// RateLimit / RateLimit-Policy and X-RateLimit-* headers; a refused one is a
// 429 problem+json with Retry-After, and next is not called.
func Middleware(c *Client, policy string, keyFunc KeyFunc, opts ...Option) func(http.Handler) http.Handler {
	l := NewLimiter(c, policy, keyFunc, opts...)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if l.Admit(w, r) {
				next.ServeHTTP(w, r)
			}
		})
	}
}

// Admit decides r. It returns true when the request may proceed (its
// rate-limit headers are already set on w); otherwise it has written the
// answer (400, 422, 429 or, failing closed, 503).
func (l *Limiter) Admit(w http.ResponseWriter, r *http.Request) bool {
	key, err := l.key(r)
	if err == nil && key == "" {
		err = errors.New("the key is empty")
	}
	if err != nil {
		writeProblem(w, http.StatusBadRequest, "invalid_request", "cannot rate-limit this request: "+err.Error(), nil)
		return false
	}
	cost := int64(1)
	if l.cost != nil {
		if cost, err = l.cost(r); err != nil || cost < 1 {
			if err == nil {
				err = fmt.Errorf("cost %d is below 1", cost)
			}
			writeProblem(w, http.StatusBadRequest, "invalid_request", "cannot price this request: "+err.Error(), nil)
			return false
		}
	}
	var res Result
	if l.local != nil {
		res, err = l.local.AllowN(r.Context(), l.policy, key, cost)
	} else {
		res, err = l.c.Check(r.Context(), l.policy, key, cost)
	}
	if err != nil {
		return l.failed(w, r, err)
	}
	SetHeaders(w.Header(), res)
	if res.Allowed {
		return true
	}
	retry := max(1, int64((res.RetryAfter+time.Second-1)/time.Second))
	w.Header().Set("Retry-After", strconv.FormatInt(retry, 10))
	writeProblem(w, http.StatusTooManyRequests, "quota_exceeded",
		fmt.Sprintf("rate limit %q exceeded; retry in %d s", res.Policy, retry),
		map[string]any{"retryAfterMs": res.RetryAfter.Milliseconds(), "limit": res.Limit, "remaining": res.Remaining, "resetAt": res.ResetAt.UnixMilli()})
	return false
}

func (l *Limiter) failed(w http.ResponseWriter, r *http.Request, err error) bool {
	if l.onError != nil {
		l.onError(r, err)
	}
	switch {
	case errors.Is(err, ErrCostExceedsLimit):
		writeProblem(w, http.StatusUnprocessableEntity, "cost_exceeds_limit", "this request costs more than the limit allows: "+err.Error(), nil)
		return false
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The caller went away; nobody reads the answer.
		return false
	case l.fail == FailOpen:
		return true
	}
	w.Header().Set("Retry-After", "1")
	writeProblem(w, http.StatusServiceUnavailable, "rate_limiter_unavailable", "the rate limiter could not decide this request: "+err.Error(), nil)
	return false
}

// SetHeaders writes the IETF RateLimit / RateLimit-Policy fields (one item
// per limit) and the X-RateLimit-* headers for a decision.
func SetHeaders(h http.Header, res Result) {
	now := time.Now()
	secs := func(d time.Duration) int64 { return max(0, int64((d+time.Second-1)/time.Second)) }
	limits := res.Limits
	if len(limits) == 0 {
		limits = []Limit{{Limit: res.Limit, Window: res.Window, Remaining: res.Remaining, ResetAt: res.ResetAt}}
	}
	var pol, rl strings.Builder
	for i, l := range limits {
		if i > 0 {
			pol.WriteString(", ")
			rl.WriteString(", ")
		}
		name := res.Policy
		if len(limits) > 1 {
			name += "-" + windowName(l.Window)
		}
		name = strconv.Quote(name)
		fmt.Fprintf(&pol, "%s;q=%d;w=%d", name, l.Limit, secs(l.Window))
		fmt.Fprintf(&rl, "%s;r=%d;t=%d", name, l.Remaining, secs(l.ResetAt.Sub(now)))
	}
	h.Set("RateLimit-Policy", pol.String())
	h.Set("RateLimit", rl.String())
	h.Set("X-RateLimit-Limit", strconv.FormatInt(res.Limit, 10))
	h.Set("X-RateLimit-Remaining", strconv.FormatInt(res.Remaining, 10))
	h.Set("X-RateLimit-Reset", strconv.FormatInt((res.ResetAt.UnixMilli()+999)/1000, 10))
	if res.WouldRefuse {
		h.Set("X-Rlnode-Shadow", "would-refuse") // as the node answers it
	}
}

// windowName spells a window the short way ("1s", "1d", "250ms"; a
// calendar month or year, whose nominal lengths the node reports, "1mo"
// and "1y").
func windowName(d time.Duration) string {
	switch d {
	case 2_629_746 * time.Second:
		return "1mo"
	case 31_556_952 * time.Second:
		return "1y"
	}
	for _, u := range []struct {
		d time.Duration
		s string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if d >= u.d && d%u.d == 0 {
			return strconv.FormatInt(int64(d/u.d), 10) + u.s
		}
	}
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}

func writeProblem(w http.ResponseWriter, status int, code, detail string, extra map[string]any) {
	body := map[string]any{"type": "about:blank", "title": http.StatusText(status), "status": status, "detail": detail, "code": code}
	if status == http.StatusTooManyRequests {
		body["type"] = "https://iana.org/assignments/http-problem-types#quota-exceeded"
		body["title"] = "Request quota exceeded"
	}
	for k, v := range extra {
		body[k] = v
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(body)
}
