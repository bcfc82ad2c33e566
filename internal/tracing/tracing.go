// Package tracing sets up OpenTelemetry tracing for `rlnode serve` from the
// standard OTEL_* environment, and holds the small hooks the front ends
// install: a Gin middleware for the HTTP API and a stats handler for the
// gRPC ports. Tracing is off unless an OTLP endpoint is configured; then
// nothing here runs on the hot path at all.
package tracing

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
)

// Environment variables read here; the SDK and the exporters read the
// rest themselves (OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _CERTIFICATE,
// OTEL_TRACES_SAMPLER and _ARG, OTEL_BSP_*, OTEL_RESOURCE_ATTRIBUTES,
// OTEL_SERVICE_NAME).
const (
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	EnvSDKDisabled    = "OTEL_SDK_DISABLED"
)

// Tracing is a configured tracer provider and the propagator that reads
// and writes W3C traceparent (and baggage) headers. A nil *Tracing is
// tracing off: every method is safe on it and returns nothing to install.
type Tracing struct {
	Provider   *sdktrace.TracerProvider
	Propagator propagation.TextMapPropagator
	// Exporter says where spans go, for the start-up log line.
	Exporter string
}

// FromEnv builds tracing from the process environment, which the SDK and
// the exporters read too. It returns nil, nil when no OTLP endpoint is set
// or OTEL_SDK_DISABLED is true. nodeID becomes the resource's
// service.instance.id.
func FromEnv(ctx context.Context, nodeID string) (*Tracing, error) {
	getenv := os.Getenv
	endpoint := firstSet(getenv, EnvTracesEndpoint, EnvEndpoint)
	if endpoint == "" || strings.EqualFold(getenv(EnvSDKDisabled), "true") {
		return nil, nil
	}
	protocol := firstSet(getenv, EnvTracesProtocol, EnvProtocol)
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch protocol {
	case "", "http/protobuf":
		protocol = "http/protobuf"
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("%s=%q: rlnode exports traces over \"http/protobuf\" or \"grpc\"", EnvProtocol, protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter (%s to %s): %w", protocol, endpoint, err)
	}
	// Ours first, so OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win.
	res, err := resource.Merge(
		resource.NewSchemaless(attribute.String("service.name", "rlnode"), attribute.String("service.instance.id", nodeID)),
		resource.Environment())
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	// No sampler option: the SDK reads OTEL_TRACES_SAMPLER (default
	// parentbased_always_on, so a caller's sampled flag is followed).
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Tracing{
		Provider:   tp,
		Propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		Exporter:   protocol + " " + endpoint,
	}, nil
}

func firstSet(getenv func(string) string, names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(getenv(n)); v != "" {
			return v
		}
	}
	return ""
}

// TracerProvider is the provider for cluster.Config: nil when off.
func (t *Tracing) TracerProvider() trace.TracerProvider {
	if t == nil {
		return nil
	}
	return t.Provider
}

// TextMapPropagator is the propagator for cluster.Config: nil when off.
func (t *Tracing) TextMapPropagator() propagation.TextMapPropagator {
	if t == nil {
		return nil
	}
	return t.Propagator
}

// Shutdown exports what is still buffered, within ctx.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	if err := t.Provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("flush traces: %w", err)
	}
	return nil
}

// Gin returns the HTTP API's middleware: one server span per request,
// named by its route and continuing the caller's traceparent. Nil when
// off (install nothing).
func (t *Tracing) Gin() []gin.HandlerFunc {
	if t == nil {
		return nil
	}
	tr := t.Provider.Tracer("github.com/rlnode/rlnode/httpapi")
	return []gin.HandlerFunc{func(c *gin.Context) {
		r := c.Request
		route := c.FullPath()
		if untraced(route) {
			c.Next()
			return
		}
		if route == "" {
			route = "unmatched"
		}
		ctx := t.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := tr.Start(ctx, r.Method+" "+route, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("http.route", route),
				attribute.String("url.path", r.URL.Path)))
		defer span.End()
		c.Request = r.WithContext(ctx)
		c.Next()
		status := c.Writer.Status()
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		if status >= 500 {
			span.SetStatus(codes.Error, fmt.Sprintf("HTTP %d", status))
		}
	}}
}

// untraced are the routes probes and scrapers call every few seconds: a
// trace each would bury the callers' traces.
func untraced(route string) bool {
	switch route {
	case "/livez", "/healthz", "/readyz", "/metrics":
		return true
	}
	return strings.HasPrefix(route, "/ui")
}

// GRPC returns the gRPC ports' server option: otelgrpc's stats handler,
// one span per call continuing the caller's trace. Nil when off.
func (t *Tracing) GRPC() []grpc.ServerOption {
	if t == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(t.Provider), otelgrpc.WithPropagators(t.Propagator)))}
}
