package main

import (
	"context"
	"net"

	"github.com/hashicorp/go-hclog"

	"github.com/rlnode/rlnode/rlqs"
	"github.com/rlnode/rlnode/rls"
)

// grpcServer is Envoy's rate limit service on --grpc-addr and its quota
// service on --rlqs-addr (either may be off).
type grpcServer struct {
	srv   *rls.Server
	quota *rlqs.Server
	errc  chan error
}

// startGRPC serves the rate limit service on ln until stop.
func startGRPC(ln net.Listener, cfg rls.Config, logger hclog.Logger) *grpcServer {
	g := &grpcServer{srv: rls.New(cfg), errc: make(chan error, 2)}
	go func() { g.errc <- g.srv.Serve(ln) }()
	logger.Info("serving Envoy's rate limit service", "grpc", ln.Addr().String())
	return g
}

// startRLQS adds the quota service on ln to g (nil: a new one).
func startRLQS(g *grpcServer, ln net.Listener, cfg rlqs.Config, logger hclog.Logger) *grpcServer {
	if g == nil {
		g = &grpcServer{errc: make(chan error, 2)}
	}
	g.quota = rlqs.New(cfg)
	go func() { g.errc <- g.quota.Serve(ln) }()
	logger.Info("serving Envoy's rate limit quota service (RLQS)", "rlqs", ln.Addr().String())
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
	if g == nil {
		return
	}
	if g.quota != nil {
		g.quota.Stop(ctx)
	}
	if g.srv != nil {
		g.srv.Stop(ctx)
	}
}
