// Command rlsload is scripts/bench.sh's load generator for Envoy's rate
// limit service (envoy.service.ratelimit.v3 ShouldRateLimit): a closed
// loop of --concurrency calls in flight over --conns HTTP/2 connections,
// as Envoy's rate limit filter makes them, each call one descriptor
// {key: value} of --domain with values drawn uniformly or by a Zipf law.
// It talks to any implementation (rlnode's --grpc-addr, envoyproxy/
// ratelimit) alike and writes rlnode bench's --json shape, so the bench
// report reads both.
//
//	rlsload --addr 127.0.0.1:8081 --domain rlsleased --key k --values 100 --concurrency 64 --duration 10s
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

type config struct {
	addrs       []string
	domain, key string
	values      int
	zipfS       float64
	concurrency int
	conns       int
	duration    time.Duration
	warmup      time.Duration
	token       string
}

// result is rlnode bench's --json shape (the fields the report reads).
type result struct {
	Mode          string           `json:"mode"`
	Concurrency   int              `json:"concurrency"`
	Keys          int              `json:"keys"`
	Dist          string           `json:"dist"`
	Path          string           `json:"path"`
	DurationMs    float64          `json:"durationMs"`
	Requests      int64            `json:"requests"`
	OK            int64            `json:"ok"`
	Allowed       int64            `json:"allowed"`
	Refused       int64            `json:"refused"`
	Errors        int64            `json:"errors"`
	ErrorKinds    map[string]int64 `json:"errorKinds"`
	ThroughputRps float64          `json:"throughputRps"`
	GoodputRps    float64          `json:"goodputRps"`
	LatencyMs     latency          `json:"latencyMs"`
}

type latency struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

func main() {
	var cfg config
	var addrs string
	flag.StringVar(&addrs, "addr", "127.0.0.1:8081", "comma list of gRPC host:port; connections are spread over them")
	flag.StringVar(&cfg.domain, "domain", "bench", "rate limit domain")
	flag.StringVar(&cfg.key, "key", "k", "descriptor entry key")
	flag.IntVar(&cfg.values, "values", 100, "distinct descriptor values (v0 ... v<values-1>)")
	flag.Float64Var(&cfg.zipfS, "zipf", 0, "draw values by a Zipf law with this exponent (> 1); 0: uniform")
	flag.IntVar(&cfg.concurrency, "concurrency", 64, "calls in flight")
	flag.IntVar(&cfg.conns, "conns", 4, "HTTP/2 connections (Envoy opens one per worker thread)")
	flag.DurationVar(&cfg.duration, "duration", 10*time.Second, "measured length")
	flag.DurationVar(&cfg.warmup, "warmup", time.Second, "unmeasured warmup before it")
	flag.StringVar(&cfg.token, "token", os.Getenv("RLNODE_TOKEN"), "bearer token sent as authorization metadata (rlnode's --cluster-token)")
	flag.Parse()
	cfg.addrs = strings.Split(addrs, ",")
	if err := cfg.check(); err != nil {
		fmt.Fprintln(os.Stderr, "rlsload:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := run(ctx, cfg)
	if err == nil && res.OK == 0 {
		err = fmt.Errorf("no call answered (%d errors: %v)", res.Errors, res.ErrorKinds)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rlsload:", err)
		os.Exit(1)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(res); err != nil {
		fmt.Fprintln(os.Stderr, "rlsload:", err)
		os.Exit(1)
	}
}

func (c config) check() error {
	switch {
	case len(c.addrs) == 0 || c.addrs[0] == "":
		return errors.New("--addr: want at least one host:port")
	case c.values < 1 || c.concurrency < 1 || c.conns < 1:
		return fmt.Errorf("--values %d, --concurrency %d, --conns %d: each must be at least 1", c.values, c.concurrency, c.conns)
	case c.zipfS != 0 && c.zipfS <= 1:
		return fmt.Errorf("--zipf %g: want an exponent above 1 (or 0 for uniform)", c.zipfS)
	case c.duration <= 0 || c.warmup < 0:
		return fmt.Errorf("--duration %s, --warmup %s: want a positive duration and a warmup of 0 or more", c.duration, c.warmup)
	}
	return nil
}

// worker is one call in flight's tally over the measured part.
type worker struct {
	lat                   []time.Duration
	allowed, refused, bad int64
	kinds                 map[string]int64
}

func run(ctx context.Context, cfg config) (result, error) {
	clients := make([]rlsv3.RateLimitServiceClient, cfg.conns)
	for i := range clients {
		conn, err := grpc.NewClient(cfg.addrs[i%len(cfg.addrs)], grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return result{}, fmt.Errorf("connect %s: %w", cfg.addrs[i%len(cfg.addrs)], err)
		}
		defer conn.Close()
		clients[i] = rlsv3.NewRateLimitServiceClient(conn)
	}
	if cfg.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+cfg.token)
	}
	// Requests are built once: the load generator's own cost stays out of
	// the servers' way.
	reqs := make([]*rlsv3.RateLimitRequest, cfg.values)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: cfg.domain, Descriptors: []*commonv3.RateLimitDescriptor{
			{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: cfg.key, Value: "v" + strconv.Itoa(i)}}}}}
	}
	start := time.Now().Add(cfg.warmup)
	end := start.Add(cfg.duration)
	workers := make([]worker, cfg.concurrency)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			me := &workers[w]
			me.kinds = map[string]int64{}
			rng := rand.New(rand.NewPCG(uint64(w), 40))
			next := func() int { return rng.IntN(cfg.values) }
			if cfg.zipfS > 0 {
				z := rand.NewZipf(rng, cfg.zipfS, 1, uint64(cfg.values-1))
				next = func() int { return int(z.Uint64()) }
			}
			c := clients[w%len(clients)]
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(end) {
					return
				}
				resp, err := c.ShouldRateLimit(ctx, reqs[next()])
				if t0.Before(start) {
					continue // warmup
				}
				switch {
				case err != nil:
					me.bad++
					me.kinds[status.Code(err).String()]++
					continue
				case resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
					me.allowed++
				default:
					me.refused++
				}
				me.lat = append(me.lat, time.Since(t0))
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return result{}, err
	}
	res := result{Mode: "closed", Concurrency: cfg.concurrency, Keys: cfg.values, Dist: "uniform",
		Path: "ShouldRateLimit " + cfg.domain + " " + cfg.key, DurationMs: float64(cfg.duration.Milliseconds()), ErrorKinds: map[string]int64{}}
	if cfg.zipfS > 0 {
		res.Dist = "zipf " + strconv.FormatFloat(cfg.zipfS, 'g', -1, 64)
	}
	var lat []time.Duration
	for _, w := range workers {
		lat = append(lat, w.lat...)
		res.Allowed += w.allowed
		res.Refused += w.refused
		res.Errors += w.bad
		for k, n := range w.kinds {
			res.ErrorKinds[k] += n
		}
	}
	res.OK = res.Allowed + res.Refused
	res.Requests = res.OK + res.Errors
	res.ThroughputRps = float64(res.Requests) / cfg.duration.Seconds()
	res.GoodputRps = float64(res.OK) / cfg.duration.Seconds()
	if len(lat) > 0 {
		slices.Sort(lat)
		q := func(f float64) float64 {
			return float64(lat[min(len(lat)-1, int(f*float64(len(lat))))]) / float64(time.Millisecond)
		}
		res.LatencyMs = latency{P50: q(0.5), P90: q(0.9), P99: q(0.99), P999: q(0.999), Max: float64(lat[len(lat)-1]) / float64(time.Millisecond)}
	}
	return res, nil
}
