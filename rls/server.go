// Package rls serves Envoy's rate limit service
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) on top of
// an rlnode cluster, configured by envoyproxy/ratelimit's YAML as imported
// into the replicated policy table (rlnode policy import-envoy).
package rls

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/grpcserve"
	"github.com/rlnode/rlnode/metrics"
	"github.com/rlnode/rlnode/policy"
)

// Limiter is what the rate limit service needs from the cluster.
type Limiter interface {
	CheckAll(ctx context.Context, hits []cluster.Hit) (cluster.CheckResult, error)
	Policies() []policy.Policy
	PolicyVersion() uint64
	Policy(name string) (policy.Policy, bool)
	SetPolicy(ctx context.Context, p policy.Policy) (string, error)
	Ready(wait time.Duration) error
	// Removed says this node was removed from the cluster: it can decide
	// nothing, so every call is UNAVAILABLE, whatever its policy.
	Removed() (reason string, removed bool)
	// Peek reads a key without counting (a descriptor's hits_addend 0).
	Peek(ctx context.Context, policyName, client string, stale bool) (cluster.PeekResult, error)
}

var _ Limiter = (*cluster.Node)(nil)

// oneChecker is the node's lean path (cluster.Node.CheckOne, the path of
// GET /check): a request whose only counted descriptor is one enforcing
// hit is one call into the node, decided from the node's leases without a
// context, a timer or an allocation when its key is hot. A Limiter
// without it (a test's) is asked through CheckAll.
type oneChecker interface {
	CheckOne(ctx context.Context, hit cluster.ValidHit, timeout time.Duration, res *cluster.OneResult) error
}

var _ oneChecker = (*cluster.Node)(nil)

// Permits serve a concurrency policy's descriptors (permit.go):
// *cluster.Budgets.
type Permits interface {
	AcquirePermit(ctx context.Context, req cluster.PermitRequest) (cluster.Permit, error)
	ReleasePermit(ctx context.Context, id, owner string) (cluster.Permit, error)
	ReleaseOldestPermit(ctx context.Context, policyName, client string) (cluster.Permit, error)
}

var _ Permits = (*cluster.Budgets)(nil)

// Refunder takes a descriptor's is_negative_hits: each hit's cost off its
// key's current window, never below zero (*cluster.Leases).
type Refunder interface {
	Refund(ctx context.Context, hits []cluster.Hit) ([]int64, error)
}

var _ Refunder = (*cluster.Leases)(nil)

// Observer records what the service decided, per descriptor. result is one
// of ok, over_limit, shadow_over_limit, unlimited, no_match (and
// global_shadow_mode once per request the global shadow mode let through).
// RLSLimit adds a limited descriptor's counters under its domain and
// descriptor key (key_value.key, values only where the configuration
// asks for them: detailed_metric, value_to_metric).
type Observer interface {
	RLSDescriptor(domain, result string)
	RLSLimit(domain, descriptor string, st metrics.RLSLimitStats)
}

// HeaderNames names the three response headers envoyproxy/ratelimit adds
// when LIMIT_RESPONSE_HEADERS_ENABLED is set: the limit, what remains and
// the seconds until the window resets, of the descriptor closest to its
// limit (an over-limit one if any).
type HeaderNames struct{ Limit, Remaining, Reset string }

// DefaultHeaderNames are envoyproxy/ratelimit's defaults.
var DefaultHeaderNames = HeaderNames{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "RateLimit-Reset"}

// Config configures the service.
type Config struct {
	Limiter Limiter
	// Permits serves concurrency policies (default: the limiter's
	// budgets, when it has them: *cluster.Node.Budgets).
	Permits Permits
	// Refunds serves negative hits (default: the limiter's leases, when
	// it has them: *cluster.Node.Leases; else the limiter, when it
	// refunds).
	Refunds Refunder
	// Token, when set, must arrive as gRPC metadata "authorization: Bearer
	// <token>" on every ShouldRateLimit call (health checks need none).
	Token string
	// TLS, when set, serves gRPC over TLS.
	TLS *tls.Config
	// Limits bounds the streams (calls) per connection, per node and per
	// credential (zero: grpcserve's defaults).
	Limits grpcserve.Limits
	// Refused, when set, counts calls refused for the stream budgets.
	Refused grpcserve.Observer
	// RequestTimeout bounds one decision (default 2s).
	RequestTimeout time.Duration
	Logger         hclog.Logger
	Observer       Observer
	// GlobalShadowMode decides every descriptor on its own and never
	// answers OVER_LIMIT overall (envoyproxy/ratelimit's SHADOW_MODE);
	// statuses still say which descriptors were over.
	GlobalShadowMode bool
	// DynamicMetadata returns the request and the metadata of the
	// descriptors that passed in the response's dynamic metadata
	// (RESPONSE_DYNAMIC_METADATA).
	DynamicMetadata bool
	// ResponseHeaders, when set, adds envoyproxy/ratelimit's three
	// limit headers under these names.
	ResponseHeaders *HeaderNames
	// PermitTTL is the TTL of a permit a concurrency policy's descriptor
	// takes (default cluster.DefaultPermitTTL, 30s): it bounds how long a
	// permit whose is_negative_hits release never comes (a lost stream
	// end, a crashed Envoy) holds its slot.
	PermitTTL time.Duration
	// ServerOptions are added to the gRPC server's (tracing, when
	// configured).
	ServerOptions []grpc.ServerOption
}

// HandshakeTimeout and MaxConnectionIdle are the port's connection
// bounds, shared with the quota service's (internal/grpcserve).
const (
	HandshakeTimeout  = grpcserve.HandshakeTimeout
	MaxConnectionIdle = grpcserve.MaxConnectionIdle
)

// Server is the gRPC server.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer
	cfg   Config
	grpc  *grpc.Server
	guard *grpcserve.Guard

	// overrideMu serialises adding override policies; addedOverrides are
	// those added here and maybe not applied here yet.
	overrideMu     sync.Mutex
	addedOverrides map[string]time.Time

	// one is the limiter's lean path, when it has one; calls pools each
	// request's room (call, lean.go).
	one   oneChecker
	calls sync.Pool

	// tree is the descriptor tree and the table version it was built
	// from, swapped whole: a request reads it without a lock.
	tree atomic.Pointer[versionedTree]
	// rebuild serialises rebuilds, so a table change is built once.
	rebuild sync.Mutex
}

// versionedTree is a descriptor tree and the policy table version it was
// built from.
type versionedTree struct {
	t       *tree
	version uint64
}

// New builds the server; Serve starts it.
func New(cfg Config) *Server {
	if cfg.PermitTTL == 0 {
		cfg.PermitTTL = cluster.DefaultPermitTTL
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if b, ok := cfg.Limiter.(interface{ Budgets() *cluster.Budgets }); ok && cfg.Permits == nil {
		cfg.Permits = b.Budgets()
	}
	if l, ok := cfg.Limiter.(interface{ Leases() *cluster.Leases }); ok && cfg.Refunds == nil {
		cfg.Refunds = l.Leases()
	}
	if r, ok := cfg.Limiter.(Refunder); ok && cfg.Refunds == nil {
		cfg.Refunds = r
	}
	s := &Server{cfg: cfg, addedOverrides: map[string]time.Time{}}
	s.one, _ = cfg.Limiter.(oneChecker)
	s.calls.New = func() any { return new(call) }
	s.grpc, s.guard = grpcserve.NewServer(grpcserve.Config{Port: "rls", Token: cfg.Token, TLS: cfg.TLS, Limits: cfg.Limits, Observer: cfg.Refused,
		ServerOptions: cfg.ServerOptions})
	rlsv3.RegisterRateLimitServiceServer(s.grpc, s)
	grpcserve.RegisterIntrospection(s.grpc, cfg.Limiter.Ready, rlsv3.RateLimitService_ServiceDesc.ServiceName)
	return s
}

// Serve answers on ln until Stop.
func (s *Server) Serve(ln net.Listener) error { return grpcserve.Serve(s.grpc, ln) }

// Stop drains in-flight calls until ctx ends, then closes every stream.
func (s *Server) Stop(ctx context.Context) { grpcserve.Stop(ctx, s.grpc) }

// OpenCalls is how many calls the port holds now (for tests).
func (s *Server) OpenCalls() int { return s.guard.Open() }

// currentTree returns the descriptor tree, rebuilt when this node's policy
// table moved on since it was built (the limits themselves always come from
// the table the deciding log entry sees).
// Every request reads it; none takes a lock unless the table moved.
func (s *Server) currentTree() *tree {
	v := s.cfg.Limiter.PolicyVersion()
	if vt := s.tree.Load(); vt != nil && vt.version == v {
		return vt.t
	}
	s.rebuild.Lock()
	defer s.rebuild.Unlock()
	if vt := s.tree.Load(); vt != nil && vt.version == v {
		return vt.t // another request built it meanwhile
	}
	// Read the version first: a change during the build leaves the tree
	// marked stale, never fresh.
	vt := &versionedTree{t: buildTree(s.cfg.Limiter.Policies()), version: v}
	s.tree.Store(vt)
	return vt.t
}
