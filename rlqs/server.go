// Package rlqs serves Envoy's rate limit quota service
// (envoy.service.rate_limit_quota.v3.RateLimitQuotaService): each Envoy
// reports its buckets' usage over a stream, and the server answers with
// token-bucket assignments whose tokens are units leased from the cluster,
// so the sum over every Envoy never exceeds the policy. See DESIGN.md.
package rlqs

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/credential"
	"github.com/rlnode/rlnode/internal/grpcserve"
	"github.com/rlnode/rlnode/lease"
	"github.com/rlnode/rlnode/policy"
)

// Node is what the quota service needs of its node.
type Node interface {
	Policy(name string) (policy.Policy, bool)
	Ready(wait time.Duration) error
	// Removed says this node was removed from the cluster: it can grant
	// nothing, so a stream ends UNAVAILABLE, whatever its buckets.
	Removed() (reason string, removed bool)
}

var _ Node = (*cluster.Node)(nil)

// Leaser lends the Envoys' budget: *cluster.Leases.
type Leaser interface {
	// Grants lends units of several keys to one holder in one log entry.
	Grants(ctx context.Context, holder string, lease time.Duration, items []cluster.GrantItem) ([]cluster.Grant, error)
	// LeaseFor is the lease to ask for a grant usable for usable (a
	// token bucket's is asked longer by the cluster's clock bound).
	LeaseFor(bucket bool, usable time.Duration) time.Duration
}

var _ Leaser = (*cluster.Leases)(nil)

// errRemoved ends a stream on a removed node: Envoy reconnects, through
// its cluster, to a node that can grant.
var errRemoved = status.Error(codes.Unavailable, "this node was removed from the cluster; nothing was granted; reconnect to another node")

// Observer records grants made for Envoys, per policy (metrics.Metrics
// implements it). result is granted, exhausted or failed.
type Observer interface {
	ObserveLease(policy, result string, units int64)
}

// Config configures the service.
type Config struct {
	Node Node
	// Leases lends the budget (default: the node's, when it has them:
	// *cluster.Node.Leases).
	Leases Leaser
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
	// NodeBuckets and CredentialBuckets bound the buckets all of this
	// node's streams, and those of one credential, may have assigned
	// (defaults 65536 and 16384); more get no assignment.
	NodeBuckets, CredentialBuckets int
	// Limits bounds the streams per connection, per node and per
	// credential (zero: grpcserve's defaults).
	Limits grpcserve.Limits
	// Refused, when set, counts streams refused for those budgets.
	Refused grpcserve.Observer
	// StreamIdle ends a stream that sent no usage report for this long
	// (default 2m): Envoy opens a new one when it next has a report.
	StreamIdle time.Duration
	// GrantRate is how many grant log entries per second this node's
	// quota streams may write together (default 100), shared evenly
	// between the open streams (see budget.go).
	GrantRate float64
	Logger    hclog.Logger
	Observer  Observer
	// ServerOptions are added to the gRPC server's (tracing, when
	// configured).
	ServerOptions []grpc.ServerOption
}

func (c *Config) setDefaults() {
	if l, ok := c.Node.(interface{ Leases() *cluster.Leases }); ok && c.Leases == nil {
		c.Leases = l.Leases()
	}
	if c.Lease == 0 {
		c.Lease = lease.DefaultLease
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
	if c.NodeBuckets == 0 {
		c.NodeBuckets = DefaultNodeBuckets
	}
	if c.CredentialBuckets == 0 {
		c.CredentialBuckets = min(DefaultCredentialBuckets, c.NodeBuckets)
	}
	if c.StreamIdle == 0 {
		c.StreamIdle = DefaultStreamIdle
	}
	if c.GrantRate == 0 {
		c.GrantRate = DefaultGrantRate
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
}

// Validate checks the settings a flag can get wrong.
func (c Config) Validate() error {
	if c.Lease < 0 || c.Lease > lease.MaxLease {
		return errors.New("rlqs lease must be from 1ms to " + lease.MaxLease.String())
	}
	if c.Transit < 0 || c.ColdAfter < 0 || c.MaxBuckets < 0 || c.StreamIdle < 0 || c.GrantRate < 0 || c.NodeBuckets < 0 || c.CredentialBuckets < 0 {
		return errors.New("rlqs: transit, cold-after, bucket limits, stream idle and grant rate must not be negative")
	}
	return nil
}

// Defaults of the stream bounds the quota service adds to the port's.
const (
	DefaultStreamIdle        = 2 * time.Minute
	DefaultGrantRate         = 100
	DefaultNodeBuckets       = 65536
	DefaultCredentialBuckets = 16384
	// DefaultMaxMessageBytes caps one usage report: a report of the 1024
	// buckets a stream may hold, with two-entry bucket ids, is about
	// 70 KB (the rate limit port's requests are far smaller: see
	// grpcserve.DefaultMaxMessageBytes).
	DefaultMaxMessageBytes = 256 << 10
)

// Server is the gRPC server of the quota service.
type Server struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	cfg     Config
	grpc    *grpc.Server
	guard   *grpcserve.Guard
	grants  *grantBudget
	buckets *grpcserve.Budget
}

// HandshakeTimeout bounds a new connection's TLS handshake and HTTP/2
// preface, as on the rate limit service's port.
const HandshakeTimeout = grpcserve.HandshakeTimeout

// New builds the server; Serve starts it.
func New(cfg Config) *Server {
	cfg.setDefaults()
	s := &Server{cfg: cfg, grants: newGrantBudget(cfg.GrantRate), buckets: grpcserve.NewBudget(cfg.NodeBuckets, cfg.CredentialBuckets)}
	s.grpc, s.guard = grpcserve.NewServer(grpcserve.Config{Port: "rlqs", Token: cfg.Token, TLS: cfg.TLS, Limits: cfg.Limits, Observer: cfg.Refused,
		ServerOptions: cfg.ServerOptions})
	rlqsv3.RegisterRateLimitQuotaServiceServer(s.grpc, s)
	grpcserve.RegisterIntrospection(s.grpc, cfg.Node.Ready, rlqsv3.RateLimitQuotaService_ServiceDesc.ServiceName)
	return s
}

// Serve answers on ln until Stop.
func (s *Server) Serve(ln net.Listener) error { return grpcserve.Serve(s.grpc, ln) }

// Stop ends every stream (Envoys reconnect elsewhere; their assignments
// run out at their TTL) and waits for the handlers until ctx ends.
func (s *Server) Stop(ctx context.Context) { grpcserve.Stop(ctx, s.grpc) }

// OpenStreams and Buckets are how many streams the port holds now and
// how many buckets they have (for tests).
func (s *Server) OpenStreams() int { return s.guard.Open() }
func (s *Server) Buckets() int     { return s.buckets.Held() }

// scope names the credentials a stream came with (the client
// certificate's fingerprint, internal/credential, else "envoy"), part of
// its holder id.
func scope(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			if name, ok := credential.OfTLS(&ti.State); ok {
				return name
			}
		}
	}
	return "envoy"
}

// StreamRateLimitQuotas serves one Envoy: its reports go in, assignments
// come out, until the stream ends.
func (s *Server) StreamRateLimitQuotas(st rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	if _, removed := s.cfg.Node.Removed(); removed {
		return errRemoved
	}
	q, err := newStream(s.cfg, st, scope(st.Context()), s.grants)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	q.cred, q.bucketBudget = grpcserve.Credential(st.Context(), s.cfg.Token), s.buckets
	return q.run()
}
