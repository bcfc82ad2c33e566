// Command ratelimited-api is a small HTTP service rate-limited by an rlnode
// cluster through the Go client's middleware.
//
//	go run ./cmd/rlnode &                      # a one-node cluster on :8080
//	go run ./examples/ratelimited-api          # this service on :8081
//	curl -i -H 'X-Api-Key: alice' localhost:8081/hello
//
// Each API key gets the "default" policy's budget (10 per 60 s unless the
// cluster says otherwise); the 11th call in a window is a 429 with
// Retry-After. Requests without a key are counted by client address.
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
	"strings"
	"syscall"
	"time"

	"github.com/rlnode/rlnode/client"
)

func main() {
	addrs := flag.String("rlnode", "127.0.0.1:8080", "comma-separated rlnode HTTP addresses")
	listen := flag.String("listen", "127.0.0.1:8081", "address this service listens on")
	policy := flag.String("policy", "default", "rlnode policy to check")
	failOpen := flag.Bool("fail-open", false, "let requests through when the rate limiter cannot answer (default: answer 503)")
	flag.Parse()

	// Two seconds (the client's default): longer than the node's one-second
	// wait for a leader, so during an election a call gets the node's 503
	// no_leader (certainly not counted) rather than running out first with
	// the outcome unknown.
	c, err := client.New(client.Config{Addrs: strings.Split(*addrs, ","), Token: os.Getenv("RLNODE_CLUSTER_TOKEN"), Timeout: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	mode := client.FailClosed
	if *failOpen {
		mode = client.FailOpen
	}
	// Key by API key when there is one, else by the caller's address.
	key := func(r *http.Request) (string, error) {
		if k := r.Header.Get("X-Api-Key"); k != "" {
			return "key:" + k, nil
		}
		ip, err := client.KeyRemoteIP(r)
		return "ip:" + ip, err
	}
	limited := client.Middleware(c, *policy, key,
		client.WithFailMode(mode),
		client.WithErrorHook(func(r *http.Request, err error) { log.Printf("rate limiter: %s %s: %v", r.Method, r.URL.Path, err) }))

	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello; %s requests left in this window\n", w.Header().Get("X-RateLimit-Remaining"))
	})
	srv := &http.Server{Addr: *listen, Handler: limited(mux), ReadHeaderTimeout: 5 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	// Listen first: a busy or malformed address fails here, before the
	// log line says the service is up.
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("listen on --listen %s: %v", *listen, err)
	}
	log.Printf("listening on %s, rate-limited by rlnode at %s (policy %q)", ln.Addr(), *addrs, *policy)
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}
