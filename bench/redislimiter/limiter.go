package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// fixedWindow counts the hit and opens the window's expiry on its first
// hit, atomically: the count and the window's remaining time in ms.
var fixedWindow = redis.NewScript(`
local n = redis.call('INCR', KEYS[1])
if n == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
local ttl = redis.call('PTTL', KEYS[1])
return {n, ttl}
`)

// Limiter is a fixed-window limiter on Redis.
type Limiter struct {
	rdb    *redis.Client
	limit  int64
	window time.Duration
	ms     string
}

// NewLimiter connects lazily to Redis at addr.
func NewLimiter(addr string, limit int64, window time.Duration, pool int) *Limiter {
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: pool, MinIdleConns: 8})
	return &Limiter{rdb: rdb, limit: limit, window: window, ms: strconv.FormatInt(window.Milliseconds(), 10)}
}

// Ping checks Redis answers.
func (l *Limiter) Ping(ctx context.Context) error { return l.rdb.Ping(ctx).Err() }

// Close closes the pool.
func (l *Limiter) Close() error { return l.rdb.Close() }

// Decision is one hit's outcome.
type Decision struct {
	Allowed   bool
	Remaining int64
	ResetAt   int64 // Unix ms
}

// Hit counts one hit for key.
func (l *Limiter) Hit(ctx context.Context, key string) (Decision, error) {
	res, err := fixedWindow.Run(ctx, l.rdb, []string{"rl:" + key}, l.ms).Int64Slice()
	if err != nil {
		return Decision{}, err
	}
	if len(res) != 2 {
		return Decision{}, fmt.Errorf("script returned %d values", len(res))
	}
	n, ttl := res[0], res[1]
	if ttl < 0 {
		ttl = l.window.Milliseconds()
	}
	d := Decision{Allowed: n <= l.limit, Remaining: max(l.limit-n, 0), ResetAt: time.Now().UnixMilli() + ttl}
	return d, nil
}

// Handler serves GET /check/{key} and GET /livez.
func Handler(l *Limiter) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /check/{key}", func(w http.ResponseWriter, r *http.Request) {
		key := r.PathValue("key")
		if key == "" || len(key) > 256 {
			http.Error(w, `{"error":"client id must be 1 to 256 bytes"}`, http.StatusBadRequest)
			return
		}
		d, err := l.Hit(r.Context(), key)
		if err != nil {
			http.Error(w, `{"error":"redis unavailable"}`, http.StatusServiceUnavailable)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "application/json")
		status := http.StatusOK
		if !d.Allowed {
			status = http.StatusTooManyRequests
			h.Set("Retry-After", strconv.FormatInt(max((d.ResetAt-time.Now().UnixMilli()+999)/1000, 1), 10))
		}
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"allowed":%t,"remaining":%d,"resetAt":%d,"limit":%d,"windowMs":%d}`,
			d.Allowed, d.Remaining, d.ResetAt, l.limit, l.window.Milliseconds())
	})
	return mux
}
