// Package rlqs serves Envoy's rate limit quota service
// (envoy.service.rate_limit_quota.v3.RateLimitQuotaService): each Envoy
// reports its buckets' usage over a stream, and the server answers with
// token-bucket assignments whose tokens are units leased from the cluster,
// so the sum over every Envoy never exceeds the policy. See DESIGN.md.
package rlqs

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"net"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/grpcserve"
	"github.com/rlnode/rlnode/policy"
)

// Leaser is what the quota service needs from the cluster.
type Leaser interface {
	Policy(name string) (policy.Policy, bool)
	Grant(ctx context.Context, req cluster.GrantRequest) (cluster.Grant, error)
	// LeaseFor is the lease to ask for a grant usable for usable (a
	// token bucket's is asked longer by the cluster's clock bound).
	LeaseFor(bucket bool, usable time.Duration) time.Duration
	Ready(wait time.Duration) error
}

var _ Leaser = (*cluster.Node)(nil)

// Observer records grants made for Envoys, per policy (metrics.Metrics
// implements it). result is granted, exhausted or failed.
type Observer interface {
	ObserveLease(policy, result string, units int64)
}

// Config configures the service.
type Config struct {
	Leaser Leaser
	// Token, when set, must arrive as gRPC metadata "authorization: Bearer
	// <token>" on the stream (health checks need none).
	Token string
	// TLS, when set, serves gRPC over TLS (mutual when it asks for client
	// certificates).
	TLS *tls.Config
	// Lease is how long each grant behind an assignment is asked to last
	// (default 2s). The server renews assignments itself before they end.
	Lease time.Duration
	// Transit is taken off every assignment's time to live for its trip
	// to Envoy, which starts the TTL when it receives the assignment
	// (default 100ms). An assignment that arrives later than this can
	// outlive its grant by the difference.
	Transit time.Duration
	// ColdAfter: a bucket whose reports show no request for this long is
	// abandoned (default 30s).
	ColdAfter time.Duration
	// MaxBuckets bounds the buckets one stream may have assigned
	// (default 1024); more get no assignment.
	MaxBuckets int
	Logger     hclog.Logger
	Observer   Observer
	// ServerOptions are added to the gRPC server's (tracing, when
	// configured).
	ServerOptions []grpc.ServerOption
}

func (c *Config) setDefaults() {
	if c.Lease == 0 {
		c.Lease = 2 * time.Second
	}
	if c.Transit == 0 {
		c.Transit = 100 * time.Millisecond
	}
	if c.ColdAfter == 0 {
		c.ColdAfter = 30 * time.Second
	}
	if c.MaxBuckets == 0 {
		c.MaxBuckets = 1024
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
}

// Validate checks the settings a flag can get wrong.
func (c Config) Validate() error {
	if c.Lease < 0 || c.Lease > cluster.MaxLease {
		return errors.New("rlqs lease must be from 1ms to " + cluster.MaxLease.String())
	}
	if c.Transit < 0 || c.ColdAfter < 0 || c.MaxBuckets < 0 {
		return errors.New("rlqs: transit, cold-after and max buckets must not be negative")
	}
	return nil
}

// Server is the gRPC server of the quota service.
type Server struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	healthpb.UnimplementedHealthServer
	cfg  Config
	grpc *grpc.Server
}

// HandshakeTimeout bounds a new connection's TLS handshake and HTTP/2
// preface, as on the rate limit service's port.
const HandshakeTimeout = 5 * time.Second

// New builds the server; Serve starts it.
func New(cfg Config) *Server {
	cfg.setDefaults()
	s := &Server{cfg: cfg}
	opts := []grpc.ServerOption{grpc.StreamInterceptor(s.authorize), grpc.ConnectionTimeout(HandshakeTimeout)}
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	s.grpc = grpc.NewServer(append(opts, cfg.ServerOptions...)...)
	rlqsv3.RegisterRateLimitQuotaServiceServer(s.grpc, s)
	healthpb.RegisterHealthServer(s.grpc, s)
	return s
}

// Serve answers on ln until Stop.
func (s *Server) Serve(ln net.Listener) error { return grpcserve.Serve(s.grpc, ln) }

// Stop ends every stream (Envoys reconnect elsewhere; their assignments
// run out at their TTL) and waits for the handlers until ctx ends.
func (s *Server) Stop(ctx context.Context) { grpcserve.Stop(ctx, s.grpc) }

func (s *Server) authorize(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := grpcserve.Authorize(ss.Context(), info.FullMethod, s.cfg.Token); err != nil {
		return err
	}
	return h(srv, ss)
}

// Check is the gRPC health check: SERVING while the node is ready.
func (s *Server) Check(_ context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	switch req.GetService() {
	case "", rlqsv3.RateLimitQuotaService_ServiceDesc.ServiceName:
	default:
		return nil, status.Errorf(codes.NotFound, "unknown service %q", req.GetService())
	}
	st := healthpb.HealthCheckResponse_SERVING
	if s.cfg.Leaser.Ready(0) != nil {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	return &healthpb.HealthCheckResponse{Status: st}, nil
}

// scope names the credentials a stream came with (the client
// certificate's fingerprint, else "token" or "anon"), part of its holder id.
func scope(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
			sum := sha256.Sum256(ti.State.PeerCertificates[0].Raw)
			return "cert-" + hex.EncodeToString(sum[:8])
		}
	}
	return "envoy"
}

// StreamRateLimitQuotas serves one Envoy: its reports go in, assignments
// come out, until the stream ends.
func (s *Server) StreamRateLimitQuotas(st rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	q, err := newStream(s.cfg, st, scope(st.Context()))
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return q.run()
}
