package main

import (
	"flag"
	"fmt"
	"net"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/gubapi"
	"github.com/rlnode/rlnode/internal/connlimit"
	"github.com/rlnode/rlnode/metrics"
	"github.com/rlnode/rlnode/tlsconf"
)

// gubFlags are gubernator's V1 API settings (docs/migrating-from-gubernator.md).
type gubFlags struct {
	addr             string
	maxKeys, perCred int64
}

func (g *gubFlags) flags(fs *flag.FlagSet) {
	fs.StringVar(&g.addr, "gubernator-addr", "", "serve gubernator's V1 API (gRPC pb.gubernator.V1: GetRateLimits, HealthCheck) on this address, with the same TLS, token and stream bounds as --grpc-addr; off by default (the HTTP gateway's POST /v1/GetRateLimits and GET /v1/HealthCheck are always on the HTTP port)")
	fs.Int64Var(&g.maxKeys, "gubernator-max-keys", cluster.DefaultCallKeys, "the most per-call keys (gubernator name and unique_key) the cluster stores; an item that would store one more answers an error (applied by the leader's setting)")
	fs.Int64Var(&g.perCred, "gubernator-max-keys-per-credential", cluster.DefaultCallKeysPerCredential, "the most per-call keys one credential (a client certificate, else the cluster token on gRPC, else the source address) may have stored; at most --gubernator-max-keys")
}

func (g *gubFlags) bounds() cluster.CallKeyBounds {
	return cluster.CallKeyBounds{Total: g.maxKeys, PerCredential: g.perCred}
}

func (g *gubFlags) validate() error {
	if err := g.bounds().Validate(); err != nil {
		return fmt.Errorf("--gubernator-max-keys %d, --gubernator-max-keys-per-credential %d: %w", g.maxKeys, g.perCred, err)
	}
	return nil
}

// bindGubernator listens on --gubernator-addr (nil when off), capped like
// the other gRPC ports.
func (c *serveConfig) bindGubernator() (net.Listener, error) {
	if c.gub.addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", c.gub.addr)
	if err != nil {
		return nil, fmt.Errorf("listen for gubernator's API on %s: %w", c.gub.addr, err)
	}
	n := max(1, c.fds.grpc/2)
	return connlimit.Wrap(ln, n, min(maxGRPCConnsPerIP, n)), nil
}

// gubernatorService is the service the gRPC port and the HTTP gateway share.
func gubernatorService(node *cluster.Node, obs *metrics.Metrics) *gubapi.Service {
	return gubapi.NewService(node, node.Calls(), obs, 0)
}

// startGubernator serves gubernator's V1 API on ln.
func (c *serveConfig) startGubernator(g *grpcServer, ln net.Listener, svc *gubapi.Service, node *cluster.Node, obs *metrics.Metrics, tlsSrc *tlsconf.Source, opts []grpc.ServerOption, logger hclog.Logger) *grpcServer {
	if g == nil {
		g = &grpcServer{errc: make(chan error, 3)}
	}
	cfg := gubapi.Config{Service: svc, Ready: node.Ready, Token: c.token, Limits: c.grpcBounds.limits(), Refused: obs, ServerOptions: opts}
	if tlsSrc != nil {
		cfg.TLS = tlsSrc.ServerConfig("h2")
	}
	g.gub = gubapi.NewServer(cfg)
	go func() { g.errc <- g.gub.Serve(ln) }()
	obs.WatchGRPCPort("gubernator", g.gub.OpenCalls, nil)
	logger.Info("serving gubernator's V1 API", "gubernator", ln.Addr().String())
	return g
}
