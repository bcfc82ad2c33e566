package gubapi

import (
	"context"
	"crypto/tls"
	"net"
	"time"

	"google.golang.org/grpc"

	"github.com/rlnode/rlnode/gubapi/gubpb"
	"github.com/rlnode/rlnode/internal/grpcserve"
)

// Config configures the gRPC port.
type Config struct {
	Service *Service
	// Ready reports whether the node can serve (gRPC health).
	Ready func(wait time.Duration) error
	// Token, when set, must arrive as gRPC metadata "authorization: Bearer
	// <token>" on every call but a health check (gubernator's client
	// sends it with grpc.WithPerRPCCredentials).
	Token string
	// TLS, when set, serves gRPC over TLS.
	TLS *tls.Config
	// Limits bounds the calls per connection, per node and per credential
	// (zero: grpcserve's defaults).
	Limits grpcserve.Limits
	// Refused, when set, counts calls refused for the stream budgets.
	Refused grpcserve.Observer
	// ServerOptions are added to the gRPC server's (tracing).
	ServerOptions []grpc.ServerOption
}

// Server is gubernator's V1 service on its own gRPC port.
type Server struct {
	gubpb.UnimplementedV1Server
	cfg   Config
	grpc  *grpc.Server
	guard *grpcserve.Guard
}

// NewServer builds the server; Serve starts it.
func NewServer(cfg Config) *Server {
	s := &Server{cfg: cfg}
	s.grpc, s.guard = grpcserve.NewServer(grpcserve.Config{Port: "gubernator", Token: cfg.Token, TLS: cfg.TLS,
		Limits: cfg.Limits, Observer: cfg.Refused, ServerOptions: cfg.ServerOptions})
	gubpb.RegisterV1Server(s.grpc, s)
	grpcserve.RegisterIntrospection(s.grpc, cfg.Ready, gubpb.V1_ServiceDesc.ServiceName)
	return s
}

// Serve answers on ln until Stop.
func (s *Server) Serve(ln net.Listener) error { return grpcserve.Serve(s.grpc, ln) }

// Stop drains in-flight calls until ctx ends, then closes what is left.
func (s *Server) Stop(ctx context.Context) { grpcserve.Stop(ctx, s.grpc) }

// OpenCalls is how many calls the port holds now.
func (s *Server) OpenCalls() int { return s.guard.Open() }

// GetRateLimits is V1.GetRateLimits: per-call keys are owned by the
// call's credential (grpcserve.Credential).
func (s *Server) GetRateLimits(ctx context.Context, req *gubpb.GetRateLimitsReq) (*gubpb.GetRateLimitsResp, error) {
	return s.cfg.Service.GetRateLimits(ctx, grpcserve.Credential(ctx, s.cfg.Token), req)
}

// HealthCheck is V1.HealthCheck.
func (s *Server) HealthCheck(context.Context, *gubpb.HealthCheckReq) (*gubpb.HealthCheckResp, error) {
	return s.cfg.Service.HealthCheck(), nil
}

// LiveCheck is V1.LiveCheck: the process answers.
func (s *Server) LiveCheck(context.Context, *gubpb.LiveCheckReq) (*gubpb.LiveCheckResp, error) {
	return &gubpb.LiveCheckResp{}, nil
}
