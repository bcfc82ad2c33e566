package main

import (
	"net"
	"strings"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/wrongport"
)

// A client that dialled the wrong port of this node is told which port it
// reached and where to go (internal/wrongport): an HTTP/1 request on a
// gRPC port gets a plain-text 400, a gRPC call on the HTTP port the status
// UNIMPLEMENTED. The Raft port's answer is the cluster's (it knows the
// HTTP address too).

// refuseHTTPOnGRPC wraps the gRPC port of service (Envoy's rate limit
// service, or its quota service).
func (c *serveConfig) refuseHTTPOnGRPC(ln net.Listener, service string) net.Listener {
	return wrongport.RefuseHTTP1(ln, "this is rlnode's gRPC port ("+service+"), not its HTTP API; the HTTP API is at "+c.httpURL())
}

// refuseGRPCOnHTTP wraps the HTTP port.
func (c *serveConfig) refuseGRPCOnHTTP(ln net.Listener) net.Listener {
	where := "this node serves no gRPC (start it with --grpc-addr for Envoy's rate limit service, --rlqs-addr for its quota service)"
	switch {
	case c.grpcAddr != "" && c.rlqsAddr != "":
		where = "Envoy's rate limit service is on " + c.grpcAddr + " (--grpc-addr), its quota service on " + c.rlqsAddr + " (--rlqs-addr)"
	case c.grpcAddr != "":
		where = "Envoy's rate limit service is on " + c.grpcAddr + " (--grpc-addr)"
	case c.rlqsAddr != "":
		where = "Envoy's quota service is on " + c.rlqsAddr + " (--rlqs-addr)"
	}
	return wrongport.RefuseGRPC(ln, "this is rlnode's HTTP port (HTTP/1.1 API), not gRPC; "+where)
}

// httpURL is where this node's HTTP API is, as peers reach it.
func (c *serveConfig) httpURL() string {
	u := cluster.BaseURL(c.httpAdvertise)
	if c.sec.tls.Enabled() {
		u = strings.Replace(u, "http://", "https://", 1)
	}
	return u
}
