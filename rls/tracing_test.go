package rls

import (
	"context"
	"net"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/rlnode/rlnode/internal/tracing"
)

// With tracing's server options a ShouldRateLimit call is a span in the
// caller's trace (its traceparent metadata continued).
func TestShouldRateLimitContinuesTheCallersTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tr := &tracing.Tracing{Provider: tp, Propagator: propagation.TraceContext{}}
	f := &fakeLimiter{policies: envoyPolicies(t, webConfig), decide: decided(true, 1)}
	s := New(Config{Limiter: f, ServerOptions: tr.GRPC()})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	defer s.Stop(context.Background())
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	if _, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, request("bob")); err != nil {
		t.Fatal(err)
	}
	for _, sp := range exp.GetSpans() {
		if sp.Name == "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" && sp.SpanContext.TraceID().String() == traceID {
			return
		}
	}
	t.Fatalf("no ShouldRateLimit span in trace %s: %v", traceID, exp.GetSpans())
}
