package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/gubapi"
	"github.com/rlnode/rlnode/internal/grpcserve"
	"github.com/rlnode/rlnode/rlqs"
	"github.com/rlnode/rlnode/rls"
)

// grpcServer is Envoy's rate limit service on --grpc-addr and its quota
// service on --rlqs-addr (either may be off).
type grpcServer struct {
	srv   *rls.Server
	quota *rlqs.Server
	gub   *gubapi.Server
	errc  chan error
}

// startGRPC serves the rate limit service on ln until stop.
func startGRPC(ln net.Listener, cfg rls.Config, logger hclog.Logger) *grpcServer {
	g := &grpcServer{srv: rls.New(cfg), errc: make(chan error, 3)}
	go func() { g.errc <- g.srv.Serve(ln) }()
	logger.Info("serving Envoy's rate limit service", "grpc", ln.Addr().String())
	return g
}

// startRLQS adds the quota service on ln to g (nil: a new one).
func startRLQS(g *grpcServer, ln net.Listener, cfg rlqs.Config, logger hclog.Logger) *grpcServer {
	if g == nil {
		g = &grpcServer{errc: make(chan error, 3)}
	}
	g.quota = rlqs.New(cfg)
	go func() { g.errc <- g.quota.Serve(ln) }()
	logger.Info("serving Envoy's rate limit quota service (RLQS)", "rlqs", ln.Addr().String())
	return g
}

// done reports a server that stopped by itself (nil when off).
func (g *grpcServer) done() <-chan error {
	if g == nil {
		return nil
	}
	return g.errc
}

func (g *grpcServer) stop(ctx context.Context) {
	if g == nil {
		return
	}
	if g.gub != nil {
		g.gub.Stop(ctx)
	}
	if g.quota != nil {
		g.quota.Stop(ctx)
	}
	if g.srv != nil {
		g.srv.Stop(ctx)
	}
}

// rlsFlags are the rate limit service's envoyproxy/ratelimit settings.
type rlsFlags struct {
	globalShadow, dynamicMetadata bool
	headers                       *rls.HeaderNames
	permitTTL                     time.Duration
}

func (r *rlsFlags) flags(fs *flag.FlagSet) {
	fs.BoolVar(&r.globalShadow, "rls-shadow-mode", false, "never answer OVER_LIMIT to Envoy, whatever the descriptors' limits say (envoyproxy/ratelimit's SHADOW_MODE); descriptors are still counted and reported")
	fs.DurationVar(&r.permitTTL, "rls-permit-ttl", cluster.DefaultPermitTTL, "TTL of the permit a concurrency policy's descriptor takes: how long a permit whose is_negative_hits release never comes holds its slot (at most --max-permit-ttl)")
	fs.BoolVar(&r.dynamicMetadata, "rls-dynamic-metadata", false, "return the request and the matched descriptors' metadata in the response's dynamic metadata (envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA)")
	fs.Func("rls-response-headers", "add envoyproxy/ratelimit's limit headers (LIMIT_RESPONSE_HEADERS_ENABLED): \"default\" for RateLimit-Limit,RateLimit-Remaining,RateLimit-Reset, or three names LIMIT,REMAINING,RESET (e.g. X-RateLimit-Limit,X-RateLimit-Remaining,X-RateLimit-Reset)", func(v string) error {
		if v == "default" {
			h := rls.DefaultHeaderNames
			r.headers = &h
			return nil
		}
		names := strings.Split(v, ",")
		if len(names) != 3 || slices.ContainsFunc(names, func(n string) bool { return !validHeaderName(strings.TrimSpace(n)) }) {
			return fmt.Errorf("want \"default\" or three header names LIMIT,REMAINING,RESET, got %q", v)
		}
		r.headers = &rls.HeaderNames{Limit: strings.TrimSpace(names[0]), Remaining: strings.TrimSpace(names[1]), Reset: strings.TrimSpace(names[2])}
		return nil
	})
}

func (r *rlsFlags) apply(c *rls.Config) {
	c.GlobalShadowMode, c.DynamicMetadata, c.ResponseHeaders = r.globalShadow, r.dynamicMetadata, r.headers
	c.PermitTTL = r.permitTTL
}

// validHeaderName: an HTTP token (RFC 9110), as Envoy accepts.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// grpcBounds are the stream bounds of both gRPC ports and the quota
// service's own (docs/security.md, "gRPC ports").
type grpcBounds struct {
	perConn          uint
	streams, perCred int
	rlqsIdle         time.Duration
	rlqsGrantRate    float64
	rlqsBuckets      int
	rlqsCredBuckets  int
	// message bounds: the rate limit port's and the quota port's largest
	// message, and how long a stream's first message may take to arrive.
	maxMessage, rlqsMaxMessage int
	messageTimeout             time.Duration
}

func (b *grpcBounds) flags(fs *flag.FlagSet) {
	fs.UintVar(&b.perConn, "grpc-max-streams-per-conn", grpcserve.DefaultStreamsPerConn, "concurrent calls and streams on one gRPC connection (--grpc-addr, --rlqs-addr; HTTP/2 MAX_CONCURRENT_STREAMS: clients queue the next ones)")
	fs.IntVar(&b.streams, "grpc-max-streams", grpcserve.DefaultStreams, "concurrent calls and streams on each gRPC port in total; more are refused with RESOURCE_EXHAUSTED")
	fs.IntVar(&b.perCred, "grpc-max-streams-per-credential", grpcserve.DefaultStreamsPerCredential, "concurrent calls and streams on each gRPC port per credential (a client certificate, else the cluster token, else the source address); more are refused with RESOURCE_EXHAUSTED")
	fs.DurationVar(&b.rlqsIdle, "rlqs-stream-idle", rlqs.DefaultStreamIdle, "close an RLQS stream that sent no usage report for this long (keep it above Envoy's reporting_interval)")
	fs.IntVar(&b.rlqsBuckets, "rlqs-max-buckets", rlqs.DefaultNodeBuckets, "buckets this node's RLQS streams may have assigned together; more get no assignment (Envoy's no_assignment_behavior applies)")
	fs.IntVar(&b.rlqsCredBuckets, "rlqs-max-buckets-per-credential", rlqs.DefaultCredentialBuckets, "buckets the RLQS streams of one credential (see --grpc-max-streams-per-credential) may have assigned together")
	fs.IntVar(&b.maxMessage, "grpc-max-message-size", grpcserve.DefaultMaxMessageBytes, "largest ShouldRateLimit request (bytes, after decompression) --grpc-addr reads; a larger one is refused with RESOURCE_EXHAUSTED before it is read (Envoy's are a few hundred bytes)")
	fs.IntVar(&b.rlqsMaxMessage, "rlqs-max-message-size", rlqs.DefaultMaxMessageBytes, "largest RLQS usage report (bytes, after decompression) --rlqs-addr reads; a larger one ends the stream with RESOURCE_EXHAUSTED (a report of 1024 buckets is about 70 KB)")
	fs.DurationVar(&b.messageTimeout, "grpc-message-timeout", grpcserve.DefaultMessageTimeout, "how long a call's request (ShouldRateLimit, a health check) may take to arrive whole on either gRPC port; a call still waiting then is cancelled (a quota stream's reports are bounded by --rlqs-stream-idle)")
	fs.Float64Var(&b.rlqsGrantRate, "rlqs-grant-rate", rlqs.DefaultGrantRate, "grant log entries per second this node's RLQS streams may write together, shared evenly between them")
}

// limits are the rate limit port's bounds.
func (b *grpcBounds) limits() grpcserve.Limits {
	return grpcserve.Limits{StreamsPerConn: uint32(min(b.perConn, math.MaxUint32)), Streams: b.streams, StreamsPerCredential: b.perCred,
		MaxMessageBytes: b.maxMessage, MessageTimeout: b.messageTimeout}
}

// rlqsLimits are the quota port's: the same but for its message size.
func (b *grpcBounds) rlqsLimits() grpcserve.Limits {
	l := b.limits()
	l.MaxMessageBytes = b.rlqsMaxMessage
	return l
}

func (b *grpcBounds) validate() []error {
	var errs []error
	if err := b.limits().Validate(); err != nil {
		errs = append(errs, fmt.Errorf("--grpc-max-streams-per-conn %d / --grpc-max-streams %d / --grpc-max-streams-per-credential %d: %w", b.perConn, b.streams, b.perCred, err))
	}
	if b.maxMessage < 1<<10 || b.rlqsMaxMessage < 1<<10 {
		errs = append(errs, fmt.Errorf("--grpc-max-message-size %d / --rlqs-max-message-size %d: must be at least 1024 bytes", b.maxMessage, b.rlqsMaxMessage))
	}
	if b.messageTimeout < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("--grpc-message-timeout %s: must be at least 100ms", b.messageTimeout))
	}
	if b.rlqsIdle < time.Second {
		errs = append(errs, fmt.Errorf("--rlqs-stream-idle %s: must be at least 1s", b.rlqsIdle))
	}
	if b.rlqsBuckets < 1 || b.rlqsCredBuckets < 1 || b.rlqsCredBuckets > b.rlqsBuckets {
		errs = append(errs, fmt.Errorf("--rlqs-max-buckets %d / --rlqs-max-buckets-per-credential %d: both at least 1, the credential's at most the node's", b.rlqsBuckets, b.rlqsCredBuckets))
	}
	if !(b.rlqsGrantRate > 0) || math.IsInf(b.rlqsGrantRate, 0) {
		errs = append(errs, fmt.Errorf("--rlqs-grant-rate %v: must be a positive number of entries per second", b.rlqsGrantRate))
	}
	return errs
}
