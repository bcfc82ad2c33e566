package grpcserve

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestAuthorize(t *testing.T) {
	with := func(v string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", v))
	}
	const m = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	for _, c := range []struct {
		name, method, token string
		ctx                 context.Context
		ok                  bool
	}{
		{"no token set", m, "", context.Background(), true},
		{"health check", "/grpc.health.v1.Health/Check", "s3cret", context.Background(), true},
		{"right token", m, "s3cret", with("Bearer s3cret"), true},
		{"wrong token", m, "s3cret", with("Bearer nope"), false},
		{"no metadata", m, "s3cret", context.Background(), false},
		{"token without Bearer", m, "s3cret", with("s3cret"), false},
	} {
		err := Authorize(c.ctx, c.method, c.token)
		if (err == nil) != c.ok || (err != nil && status.Code(err) != codes.Unauthenticated) {
			t.Errorf("%s: %v, want ok=%v (else Unauthenticated)", c.name, err, c.ok)
		}
	}
}
