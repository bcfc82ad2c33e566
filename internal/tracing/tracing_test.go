package tracing_test

import (
	"context"
	"encoding/hex"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/rlnode/rlnode/internal/tracing"
)

// setenv sets the OTEL variables m names and clears the others.
func setenv(t *testing.T, m map[string]string) {
	for _, k := range []string{tracing.EnvEndpoint, tracing.EnvTracesEndpoint, tracing.EnvProtocol, tracing.EnvTracesProtocol, tracing.EnvSDKDisabled} {
		t.Setenv(k, m[k])
	}
}

func TestOffUnlessAnEndpointIsSet(t *testing.T) {
	for _, m := range []map[string]string{
		{},
		{"OTEL_SERVICE_NAME": "edge"},
		{tracing.EnvEndpoint: "http://127.0.0.1:4318", tracing.EnvSDKDisabled: "true"},
	} {
		setenv(t, m)
		tr, err := tracing.FromEnv(context.Background(), "n1")
		if err != nil || tr != nil {
			t.Fatalf("%v: got %v, %v; want tracing off", m, tr, err)
		}
		// Off installs nothing.
		if tr.Gin() != nil || tr.GRPC() != nil || tr.TracerProvider() != nil || tr.Shutdown(context.Background()) != nil {
			t.Fatalf("%v: off but hooks to install", m)
		}
	}
}

func TestUnknownProtocolIsAClearError(t *testing.T) {
	setenv(t, map[string]string{tracing.EnvEndpoint: "http://127.0.0.1:4318", tracing.EnvProtocol: "http/json"})
	_, err := tracing.FromEnv(context.Background(), "n1")
	if err == nil || !strings.Contains(err.Error(), `"grpc"`) {
		t.Fatalf("http/json: %v; want an error naming the protocols rlnode speaks", err)
	}
}

// grpcReceiver is an OTLP/gRPC trace receiver on loopback.
type grpcReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu     sync.Mutex
	traces []string
}

func (r *grpcReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				r.traces = append(r.traces, hex.EncodeToString(s.TraceId))
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// OTEL_EXPORTER_OTLP_PROTOCOL=grpc exports over gRPC; Shutdown flushes.
func TestExportsOverGRPC(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rec := &grpcReceiver{}
	collectortrace.RegisterTraceServiceServer(srv, rec)
	go srv.Serve(ln)
	defer srv.Stop()

	setenv(t, map[string]string{tracing.EnvTracesEndpoint: "http://" + ln.Addr().String(), tracing.EnvProtocol: "grpc"})
	tr, err := tracing.FromEnv(context.Background(), "n1")
	if err != nil || tr == nil {
		t.Fatalf("FromEnv: %v, %v", tr, err)
	}
	_, span := tr.Provider.Tracer("test").Start(context.Background(), "one")
	want := span.SpanContext().TraceID().String()
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.traces) != 1 || rec.traces[0] != want {
		t.Fatalf("receiver got traces %v; want [%s]", rec.traces, want)
	}
}

// The HTTP middleware names a span by its route in the caller's trace, and
// leaves the probes' routes untraced.
func TestGinSpansContinueTheCallersTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr := &tracing.Tracing{Provider: sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)), Propagator: propagation.TraceContext{}}
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	e.Use(tr.Gin()...)
	e.GET("/check/:a", func(c *gin.Context) { c.Status(http.StatusTooManyRequests) })
	e.GET("/livez", func(c *gin.Context) { c.Status(http.StatusOK) })
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	for _, path := range []string{"/check/alice", "/livez"} {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
		e.ServeHTTP(httptest.NewRecorder(), req)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Name != "GET /check/:a" || spans[0].SpanContext.TraceID().String() != traceID {
		t.Fatalf("spans %v; want one, GET /check/:a in trace %s", spans, traceID)
	}
}
