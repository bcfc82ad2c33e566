package grpcserve

import (
	"context"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/rlnode/rlnode/internal/credential"
)

// Observer counts calls a port refused for its stream budgets. reason is
// "node" (the port's total) or "credential".
type Observer interface {
	GRPCRefused(port, reason string)
}

// Guard admits calls on one port: the token first, then the stream
// budgets. Health checks pass both (they are answered at once, and a
// load balancer's probe must not be turned away because one client holds
// its budget full).
type Guard struct {
	cfg     Config
	streams *Budget

	// server and the client-streaming methods of its services (tap.go).
	server        *grpc.Server
	streamingOnce sync.Once
	streaming     map[string]bool
}

func newGuard(cfg Config) *Guard {
	return &Guard{cfg: cfg, streams: NewBudget(cfg.Limits.Streams, cfg.Limits.StreamsPerCredential)}
}

// Open is how many calls and streams the port holds now.
func (g *Guard) Open() int { return g.streams.Held() }

// Credential names who a call's budget is counted against
// (internal/credential, the one fingerprint for HTTP and gRPC): the client
// certificate's fingerprint under mutual TLS, else the cluster token's
// when the port wants it (everyone holding it is one credential), else
// the caller's IP address (an unauthenticated port, loopback by default).
func Credential(ctx context.Context, token string) string {
	p, ok := peer.FromContext(ctx)
	if ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			if name, ok := credential.OfTLS(&ti.State); ok {
				return name
			}
		}
	}
	if token != "" {
		return credential.Token(token)
	}
	if ok && p.Addr != nil {
		return credential.Addr(p.Addr.String())
	}
	return credential.Addr("")
}

// admit takes one stream of the budgets for ctx's credential; release
// gives it back.
func (g *Guard) admit(ctx context.Context, method string) (release func(), err error) {
	if err := Authorize(ctx, method, g.cfg.Token); err != nil {
		return nil, err
	}
	if strings.HasPrefix(method, healthPrefix) {
		return func() {}, nil
	}
	cred := Credential(ctx, g.cfg.Token)
	switch full := g.streams.Take(cred); full {
	case FullNode:
		g.refused(full)
		return nil, status.Errorf(codes.ResourceExhausted, "this port holds its limit of %d concurrent calls and streams (--grpc-max-streams); retry later", g.cfg.Limits.Streams)
	case FullCredential:
		g.refused(full)
		return nil, status.Errorf(codes.ResourceExhausted, "your credential (%s) holds its limit of %d concurrent calls and streams on this port (--grpc-max-streams-per-credential); close some or retry later", cred, g.cfg.Limits.StreamsPerCredential)
	}
	var once sync.Once
	return func() { once.Do(func() { g.streams.Release(cred, 1) }) }, nil
}

func (g *Guard) refused(reason string) {
	if g.cfg.Observer != nil {
		g.cfg.Observer.GRPCRefused(g.cfg.Port, reason)
	}
}
