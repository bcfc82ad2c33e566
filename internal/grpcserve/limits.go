package grpcserve

import (
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
)

// HandshakeTimeout bounds how long a new connection may take to finish
// its TLS handshake and HTTP/2 preface, as the HTTP port's
// ReadHeaderTimeout bounds a request's headers. gRPC's own default, 120 s,
// let a script's silent sockets pile up until the node ran out of file
// descriptors.
const HandshakeTimeout = 5 * time.Second

// MaxConnectionIdle is how long a gRPC connection may carry no call or
// stream before the server closes it gracefully (GOAWAY; Envoy
// reconnects when it next needs the port).
const MaxConnectionIdle = 10 * time.Minute

// Keep-alive: the server pings a connection that sent nothing for
// PingAfter and closes it when the ping goes unanswered for PingTimeout,
// so a peer that vanished (cable, crash, NAT timeout) frees its streams
// within minutes instead of TCP's hours. A client may ping at most every
// MinClientPing, with or without streams; faster pingers are sent GOAWAY
// (too_many_pings), gRPC's enforcement.
const (
	PingAfter     = time.Minute
	PingTimeout   = 20 * time.Second
	MinClientPing = 10 * time.Second
)

// Limits bounds what callers may hold open on one gRPC port. Each port
// (the rate limit service's, the quota service's) counts its own.
type Limits struct {
	// StreamsPerConn caps the concurrent calls and streams on one
	// connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS): gRPC clients
	// queue the next ones until one ends; a client that ignores the
	// setting has the extra streams refused (RST_STREAM REFUSED_STREAM).
	StreamsPerConn uint32
	// Streams caps the concurrent calls and streams on the port; one
	// credential (see Credential) holds at most StreamsPerCredential of
	// them. Past either, a call ends at once with RESOURCE_EXHAUSTED.
	Streams, StreamsPerCredential int
}

// Default limits: far above what an Envoy fleet holds (a stream per
// Envoy worker on the quota port; concurrent ShouldRateLimit calls, each a
// few milliseconds, on the rate limit port), far below what costs the
// node its memory (each open stream costs gRPC about 20 KB).
const (
	DefaultStreamsPerConn       = 256
	DefaultStreams              = 4096
	DefaultStreamsPerCredential = 1024
)

// DefaultLimits are the limits of a port whose flags are left alone.
func DefaultLimits() Limits {
	return Limits{StreamsPerConn: DefaultStreamsPerConn, Streams: DefaultStreams, StreamsPerCredential: DefaultStreamsPerCredential}
}

// withDefaults fills the limits left zero with the defaults.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.StreamsPerConn == 0 {
		l.StreamsPerConn = d.StreamsPerConn
	}
	if l.Streams == 0 {
		l.Streams = d.Streams
	}
	if l.StreamsPerCredential == 0 {
		l.StreamsPerCredential = min(d.StreamsPerCredential, l.Streams)
	}
	return l
}

// Validate checks limits a flag can get wrong.
func (l Limits) Validate() error {
	if l.StreamsPerConn < 1 || l.Streams < 1 || l.StreamsPerCredential < 1 {
		return fmt.Errorf("gRPC stream limits must be at least 1 (per connection %d, per node %d, per credential %d)",
			l.StreamsPerConn, l.Streams, l.StreamsPerCredential)
	}
	if l.StreamsPerCredential > l.Streams {
		return errors.New("gRPC streams per credential must not exceed the node's total")
	}
	return nil
}

// Config is what both gRPC ports share.
type Config struct {
	// Port names the port in metrics ("rls", "rlqs").
	Port string
	// Token, when set, must arrive as metadata "authorization: Bearer
	// <token>" on every call but a health check.
	Token string
	// TLS, when set, serves gRPC over TLS (mutual when it asks for
	// client certificates).
	TLS    *tls.Config
	Limits Limits
	// Observer, when set, counts refused calls.
	Observer Observer
	// ServerOptions are added to the server's own (tracing's stats
	// handler, when configured).
	ServerOptions []grpc.ServerOption
}

// NewServer builds a gRPC server with the ports' shared guard: the
// handshake timeout, keep-alive enforcement, idle connections closed,
// the per-connection stream cap, and interceptors that check the token
// and then the stream budgets. Zero limits are the defaults.
func NewServer(cfg Config) (*grpc.Server, *Guard) {
	cfg.Limits = cfg.Limits.withDefaults()
	g := newGuard(cfg)
	opts := []grpc.ServerOption{
		grpc.ConnectionTimeout(HandshakeTimeout),
		grpc.MaxConcurrentStreams(cfg.Limits.StreamsPerConn),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: MaxConnectionIdle, Time: PingAfter, Timeout: PingTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: MinClientPing, PermitWithoutStream: true}),
		grpc.ChainUnaryInterceptor(g.unary),
		grpc.ChainStreamInterceptor(g.stream),
	}
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	return grpc.NewServer(append(opts, cfg.ServerOptions...)...), g
}
