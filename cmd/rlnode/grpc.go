package main

import (
	"context"
	"fmt"
	"net"

	"github.com/hashicorp/go-hclog"

	"github.com/rlnode/rlnode/rls"
)

// grpcServer is Envoy's rate limit service on --grpc-addr.
type grpcServer struct {
	srv  *rls.Server
	errc chan error
}

// startGRPC listens on addr and serves the rate limit service until stop.
func startGRPC(addr string, cfg rls.Config, logger hclog.Logger) (*grpcServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for gRPC on %s: %w", addr, err)
	}
	g := &grpcServer{srv: rls.New(cfg), errc: make(chan error, 1)}
	go func() { g.errc <- g.srv.Serve(ln) }()
	logger.Info("serving Envoy's rate limit service", "grpc", ln.Addr().String())
	return g, nil
}

// done reports a server that stopped by itself (nil when off).
func (g *grpcServer) done() <-chan error {
	if g == nil {
		return nil
	}
	return g.errc
}

func (g *grpcServer) stop(ctx context.Context) {
	if g != nil {
		g.srv.Stop(ctx)
	}
}
