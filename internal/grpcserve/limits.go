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
	// MaxMessageBytes caps one received message, before and after
	// decompression (gRPC refuses a larger one with RESOURCE_EXHAUSTED
	// from its length prefix, before reading it; a compressed one as soon
	// as it expands past the cap).
	MaxMessageBytes int
	// MessageTimeout is how long the request of a call whose client sends
	// one message (unary, server-streaming) may take to arrive whole after
	// the call starts; a call still waiting then is cancelled.
	MessageTimeout time.Duration
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

// Message bounds. Envoy's ShouldRateLimit requests are a few hundred
// bytes (a domain and a handful of descriptors), and a quota usage report
// of the 1024 buckets a stream may hold is about 70 KB with two-entry
// bucket ids: DefaultMaxMessageBytes is far above the first, and the
// quota port's default (rlqs) is above the second. gRPC's own default,
// 4 MB, let one decoded request of tiny descriptors take 127 MB of heap.
// A message arrives in milliseconds; DefaultMessageTimeout leaves a slow
// link hundreds of times that.
const (
	DefaultMaxMessageBytes = 64 << 10
	DefaultMessageTimeout  = 10 * time.Second
)

// MaxHeaderListSize caps a stream's request headers, as the HTTP port
// caps a request's (httpapi.MaxHeaderBytes, 64 KiB); gRPC's own default,
// 16 MB, let 20 connections that never finished their header blocks hold
// 625 MB. A larger block is refused (RST_STREAM) without being kept.
const MaxHeaderListSize = 64 << 10

// Flow-control windows: fixed, so a stream buffers at most a window of
// data it has not read (gRPC's default grows them with the link's
// bandwidth-delay product, up to 16 MB per stream). A message longer than
// the stream's window gets its whole length granted when gRPC starts
// reading it, so the window costs no throughput for Envoy's messages.
const (
	streamWindow = 64 << 10
	connWindow   = 1 << 20
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
	if l.MaxMessageBytes == 0 {
		l.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if l.MessageTimeout == 0 {
		l.MessageTimeout = DefaultMessageTimeout
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
	if l.MaxMessageBytes < 0 || l.MessageTimeout < 0 {
		return errors.New("gRPC message size and message timeout must not be negative (0: the default)")
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
// the per-connection stream cap, the header, message and window bounds,
// and a tap (see tap.go) that checks the token and the stream budgets
// before a message is read. Zero limits are the defaults.
func NewServer(cfg Config) (*grpc.Server, *Guard) {
	cfg.Limits = cfg.Limits.withDefaults()
	g := newGuard(cfg)
	opts := []grpc.ServerOption{
		grpc.ConnectionTimeout(HandshakeTimeout),
		grpc.MaxConcurrentStreams(cfg.Limits.StreamsPerConn),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: MaxConnectionIdle, Time: PingAfter, Timeout: PingTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: MinClientPing, PermitWithoutStream: true}),
		grpc.MaxHeaderListSize(MaxHeaderListSize),
		grpc.MaxRecvMsgSize(cfg.Limits.MaxMessageBytes),
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
		grpc.InTapHandle(g.tap),
		grpc.ChainUnaryInterceptor(g.unary),
		grpc.ChainStreamInterceptor(g.stream),
	}
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	g.server = grpc.NewServer(append(opts, cfg.ServerOptions...)...)
	return g.server, g
}
