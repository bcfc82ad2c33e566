package grpcserve

import (
	"context"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
)

// health is the standard health service (grpc.health.v1.Health) of one
// port: Check answers SERVING while the node is ready (knows a leader and
// has applied what it knows is committed), NOT_SERVING otherwise, for ""
// and the port's own services. It reads readiness on every call rather
// than keeping a status that a goroutine would have to update.
type health struct {
	healthpb.UnimplementedHealthServer
	services []string
	ready    func(wait time.Duration) error
}

func (h *health) Check(_ context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if svc := req.GetService(); svc != "" && !slices.Contains(h.services, svc) {
		return nil, status.Errorf(codes.NotFound, "unknown service %q", svc)
	}
	st := healthpb.HealthCheckResponse_SERVING
	if h.ready(0) != nil {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	return &healthpb.HealthCheckResponse{Status: st}, nil
}

// RegisterIntrospection adds what tools need to talk to a port by hand:
// the standard health service answering for services (and ""), and
// server reflection (v1 and v1alpha), so `grpcurl ADDR list` and
// `describe` work without .proto files. Reflection goes through the
// port's guard like any call; health checks need no token.
func RegisterIntrospection(s *grpc.Server, ready func(wait time.Duration) error, services ...string) {
	healthpb.RegisterHealthServer(s, &health{services: services, ready: ready})
	reflection.Register(s)
}
