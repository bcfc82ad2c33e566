package cluster

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Tracing follows a hit from the node that took it to the leader that
// decided it: the forward hop (its span context travels in the W3C
// traceparent header of the internal request), the leader operations and
// grants, and the wait for the commit. A batch carries hits of many
// traces: its span is a child of the first hit's trace and links to every
// hit's. With no TracerProvider configured the tracer is nil and every hook
// is one nil check: no span, no allocation.
type tracer struct {
	t    trace.Tracer
	prop propagation.TextMapPropagator
}

// instrumentation names the spans' source in every exported trace.
const instrumentation = "github.com/rlnode/rlnode/cluster"

func newTracer(tp trace.TracerProvider, prop propagation.TextMapPropagator) *tracer {
	if tp == nil {
		return nil
	}
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	return &tracer{t: tp.Tracer(instrumentation), prop: prop}
}

// start begins a span under ctx's; off, it returns a no-op span.
func (t *tracer) start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if t == nil {
		return ctx, noop.Span{}
	}
	return t.t.Start(ctx, name, trace.WithAttributes(attrs...))
}

// startBatch begins the span of a batch of hits from the callers' span
// contexts (from, one per group; invalid ones are callers that were not
// traced). It is a child of the first traced caller and links to each.
func (t *tracer) startBatch(ctx context.Context, name string, from []trace.SpanContext, hits int) (context.Context, trace.Span) {
	if t == nil {
		return ctx, noop.Span{}
	}
	var links []trace.Link
	parent := ctx
	for _, sc := range from {
		if !sc.IsValid() {
			continue
		}
		if links == nil {
			parent = trace.ContextWithSpanContext(ctx, sc)
		}
		links = append(links, trace.Link{SpanContext: sc})
	}
	return t.t.Start(parent, name, trace.WithLinks(links...),
		trace.WithAttributes(attribute.Int("rlnode.groups", len(from)), attribute.Int("rlnode.hits", hits)))
}

// callerOf captures a waiter's caller for startBatch (nil when off).
func (t *tracer) callerOf(ctx context.Context) *trace.SpanContext {
	if t == nil {
		return nil
	}
	sc := trace.SpanContextFromContext(ctx)
	return &sc
}

// inject puts ctx's span context on an outgoing internal request.
func (t *tracer) inject(ctx context.Context, h http.Header) {
	if t != nil {
		t.prop.Inject(ctx, propagation.HeaderCarrier(h))
	}
}

// handler traces the internal endpoints: a request that carries a trace
// continues it. One that carries none (a peer's clock reading, a status
// poll) starts no trace of its own: only a caller's request is followed.
func (t *tracer) handler(next http.Handler) http.Handler {
	if t == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		if !trace.SpanContextFromContext(ctx).IsValid() {
			next.ServeHTTP(w, r)
			return
		}
		ctx, span := t.t.Start(ctx, "rlnode.internal "+r.URL.Path, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", r.Method)))
		defer span.End()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// fail marks a span failed with err (nil: nothing).
func fail(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}
