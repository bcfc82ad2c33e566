// Package grpcserve holds what rlnode's gRPC ports (Envoy's rate limit
// service and its quota service) share: the server with its connection
// and stream bounds (NewServer, Limits), the guard that checks the
// cluster token and the stream budgets per node and per credential, the
// health and reflection services, serving until stopped, and a graceful
// stop bounded by a context.
package grpcserve

import (
	"context"
	"errors"
	"net"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rlnode/rlnode/internal/bearer"
)

// healthPrefix names the gRPC health service, which load balancers and
// Envoy's health checks call without credentials.
const healthPrefix = "/grpc.health.v1.Health/"

// Authorize lets a call go on when no token is set, when it is a health
// check, or when its metadata carries `authorization: Bearer <token>`.
func Authorize(ctx context.Context, method, token string) error {
	if token == "" || strings.HasPrefix(method, healthPrefix) {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if bearer.Valid(v, token) {
			return nil
		}
	}
	return status.Error(codes.Unauthenticated, "this service needs the cluster token: metadata authorization: Bearer <token>")
}

// Serve answers on ln until Stop; a stopped server is not an error.
func Serve(s *grpc.Server, ln net.Listener) error {
	err := s.Serve(ln)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Stop drains in-flight calls and streams until ctx ends, then closes
// whatever is left.
func Stop(ctx context.Context, s *grpc.Server) {
	done := make(chan struct{})
	go func() {
		s.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.Stop()
		<-done
	}
}
