// Command redislimiter is the baseline rlnode is measured against: the
// limiter people build instead of rlnode, a Go HTTP server in front of Redis
// doing a fixed window with INCR and PEXPIRE in one Lua script. It answers
// GET /check/{key} like rlnode (200 allowed, 429 refused with Retry-After,
// a small JSON body) so `rlnode bench` can drive both the same way.
//
// It lives in its own module so rlnode's module does not depend on Redis.
// scripts/bench.sh builds and starts it next to a redis-server it starts.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8090", "HTTP listen address")
	redisAddr := flag.String("redis", "127.0.0.1:6379", "Redis address")
	limit := flag.Int64("limit", 10, "hits allowed per key per window")
	window := flag.Duration("window", time.Minute, "window length")
	pool := flag.Int("pool", 512, "Redis connections (at least the benchmark's workers, so none waits for a connection)")
	flag.Parse()
	if err := run(*addr, *redisAddr, *limit, *window, *pool); err != nil {
		fmt.Fprintln(os.Stderr, "redislimiter:", err)
		os.Exit(1)
	}
}

func run(addr, redisAddr string, limit int64, window time.Duration, pool int) error {
	if limit < 1 || window < time.Millisecond {
		return errors.New("--limit must be >= 1 and --window >= 1ms")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	lim := NewLimiter(redisAddr, limit, window, pool)
	defer lim.Close()
	if err := lim.Ping(ctx); err != nil {
		return fmt.Errorf("reach redis at %s: %w", redisAddr, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: Handler(lim), ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Printf("redislimiter on %s, redis %s, limit %d per %s", ln.Addr(), redisAddr, limit, window)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}
