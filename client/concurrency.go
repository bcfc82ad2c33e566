package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// ConcurrencyMiddleware holds a permit of policy (a concurrency policy)
// for keyFunc's key while next serves each request: at most the policy's
// limit of requests per key run at once, across every instance of the
// application. A request over the limit gets a 429 with Retry-After and
// next is not called. The permit is released when next returns; ttl (0:
// 30s) bounds how long a permit outlives a crashed instance, so choose it
// above the longest request. A failure to decide answers 503 (or, with
// WithFailMode(FailOpen), lets the request through without a permit).
func ConcurrencyMiddleware(c *Client, policy string, keyFunc KeyFunc, ttl time.Duration, opts ...Option) func(http.Handler) http.Handler {
	l := NewLimiter(c, policy, keyFunc, opts...)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			release, ok := l.hold(w, r, ttl)
			if !ok {
				return
			}
			defer release()
			next.ServeHTTP(w, r)
		})
	}
}

// hold takes a permit for r, or answers r itself (ok false).
func (l *Limiter) hold(w http.ResponseWriter, r *http.Request, ttl time.Duration) (release func(), ok bool) {
	key, err := l.key(r)
	if err == nil && key == "" {
		err = errors.New("the key is empty")
	}
	if err != nil {
		writeProblem(w, http.StatusBadRequest, "invalid_request", "cannot limit this request: "+err.Error(), nil)
		return nil, false
	}
	p, err := l.c.Acquire(r.Context(), l.policy, key, ttl)
	if err != nil {
		return func() {}, l.failed(w, r, err)
	}
	if !p.Acquired {
		retry := max(1, int64((p.RetryAfter+time.Second-1)/time.Second))
		w.Header().Set("Retry-After", strconv.FormatInt(retry, 10))
		writeProblem(w, http.StatusTooManyRequests, "quota_exceeded",
			fmt.Sprintf("%d of %d requests of this key are in flight (policy %q); retry in %d s", p.Live, p.Limit, l.policy, retry),
			map[string]any{"retryAfterMs": p.RetryAfter.Milliseconds(), "limit": p.Limit})
		return nil, false
	}
	return func() {
		// The request is over even if its caller went away: release
		// with a context of its own.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), l.c.cfg.Timeout)
		defer cancel()
		if err := l.c.Release(ctx, p.ID); err != nil && l.onError != nil {
			l.onError(r, err)
		}
	}, true
}
