package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/httpapi"
	"github.com/rlnode/rlnode/internal/tracing"
)

// discard is an exporter that drops spans: the benchmark measures what
// tracing costs the request, not the network.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkCheckTracing is GET /check/:client on a one-node cluster (real
// Raft, real log), handled in process, with tracing off (no provider: the
// hooks are nil checks) and on (every request sampled, spans batched to
// an exporter that drops them). Compare ns/op and allocs/op:
//
//	go test -run XXX -bench CheckTracing -benchmem ./httpapi
func BenchmarkCheckTracing(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "off"
		var tr *tracing.Tracing
		if on {
			name = "on"
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}), sdktrace.WithSampler(sdktrace.AlwaysSample()))
			b.Cleanup(func() { tp.Shutdown(context.Background()) })
			tr = &tracing.Tracing{Provider: tp, Propagator: propagation.TraceContext{}}
		}
		b.Run(name, func(b *testing.B) {
			c := clustertest.Start(b, 1, clustertest.Options{Limit: 1 << 40, Window: time.Hour, TracerProvider: tr.TracerProvider()})
			node := c.Leader(10 * time.Second).Node
			h := node.Mount(httpapi.New(httpapi.Config{Node: node, Middleware: tr.Gin()}).Handler())
			b.SetParallelism(32) // 64 callers on 2 cores: group commit fills batches
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					w := httptest.NewRecorder()
					h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/check/bench-"+strconv.Itoa(i%512), nil))
					if w.Code != http.StatusOK {
						b.Errorf("check: %d %s", w.Code, w.Body)
						return
					}
				}
			})
		})
	}
}
