package cluster_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/rlnode/rlnode/cluster/clustertest"
)

// Hits of many traced callers on a follower travel in shared batches: each
// batch's forward span belongs to one caller's trace and links to every
// caller in it, so every caller's trace reaches the forward hop; the
// leader's commit spans continue the forwarded batches' traces (the wire
// carries one trace context per batch, not per hit).
func TestBatchSpansLinkEveryCaller(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	c := clustertest.Start(t, 3, clustertest.Options{Limit: 1000, TracerProvider: tp})
	f := c.Followers(c.Leader(5 * time.Second))[0]

	const callers = 24
	want := map[string]bool{}
	var wg sync.WaitGroup
	for i := range callers {
		var tid trace.TraceID
		copy(tid[:], fmt.Sprintf("caller-%02d-trace!", i))
		want[tid.String()] = true
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{1, byte(i)}, TraceFlags: trace.FlagsSampled, Remote: true})
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := f.Check(trace.ContextWithRemoteSpanContext(context.Background(), sc), "default", fmt.Sprint("k", i), 1); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	commits := 0
	for _, s := range exp.GetSpans() {
		if s.Name == "rlnode.commit" {
			commits++
			if !want[s.SpanContext.TraceID().String()] {
				t.Errorf("commit span in trace %s, no caller's", s.SpanContext.TraceID())
			}
		}
	}
	if commits == 0 {
		t.Error("the leader exported no commit span")
	}
	reached := map[string]bool{}
	for _, s := range exp.GetSpans() {
		if s.Name != "rlnode.forward" {
			continue
		}
		if !want[s.SpanContext.TraceID().String()] {
			t.Errorf("forward span in trace %s, no caller's", s.SpanContext.TraceID())
		}
		for _, l := range s.Links {
			reached[l.SpanContext.TraceID().String()] = true
		}
	}
	for id := range want {
		if !reached[id] {
			t.Errorf("no forward span links to caller trace %s", id)
		}
	}
}
