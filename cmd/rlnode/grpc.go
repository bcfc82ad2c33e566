package main

import (
	"context"
	"net"

	"github.com/hashicorp/go-hclog"

	"github.com/rlnode/rlnode/rls"
)

// grpcServer is Envoy's rate limit service on --grpc-addr.
type grpcServer struct {
	srv  *rls.Server
	errc chan error
}

// startGRPC serves the rate limit service on ln until stop.
func startGRPC(ln net.Listener, cfg rls.Config, logger hclog.Logger) *grpcServer {
	g := &grpcServer{srv: rls.New(cfg), errc: make(chan error, 1)}
	go func() { g.errc <- g.srv.Serve(ln) }()
	logger.Info("serving Envoy's rate limit service", "grpc", ln.Addr().String())
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
	if g != nil {
		g.srv.Stop(ctx)
	}
}
