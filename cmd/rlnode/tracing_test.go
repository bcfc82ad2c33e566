package main

import (
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// otlpSpan is one exported span as a receiver sees it.
type otlpSpan struct {
	node, name, traceID string
}

// otlpReceiver is an OTLP/HTTP trace receiver on loopback: it decodes each
// export request (protobuf) and keeps the spans.
type otlpReceiver struct {
	url   string
	mu    sync.Mutex
	spans []otlpSpan
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := &otlpReceiver{url: "http://" + ln.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(rec.serve)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return rec
}

func (rec *otlpReceiver) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want POST /v1/traces in protobuf", http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(r.Body)
	var req collectortrace.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &req)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rec.mu.Lock()
	for _, rs := range req.ResourceSpans {
		node := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.instance.id" {
				node = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				rec.spans = append(rec.spans, otlpSpan{node: node, name: s.Name, traceID: hex.EncodeToString(s.TraceId)})
			}
		}
	}
	rec.mu.Unlock()
	b, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(b)
}

// names returns the names of the spans node exported in trace id.
func (rec *otlpReceiver) names(node, id string) map[string]bool {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	out := map[string]bool{}
	for _, s := range rec.spans {
		if s.node == node && s.traceID == id {
			out[s.name] = true
		}
	}
	return out
}

// A /check sent to a follower with a W3C traceparent is followed to the
// leader: both nodes export spans (the follower's HTTP span and forward,
// the leader's internal span and commit) in the caller's trace.
func TestTracesFollowACheckToTheLeader(t *testing.T) {
	proctest.Long(t)
	rec := startOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rec.url)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100") // export within 0.1 s, not 5 s
	nodes := proctest.StartCluster(t, rlnodeBin, 3)
	leader, follower := followerOf(t, nodes)

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, err := http.NewRequest(http.MethodGet, follower.URL()+"/check/traced-client", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("check on follower %s: %d", follower.ID, resp.StatusCode)
	}

	want := map[*proctest.Node][]string{
		follower: {"GET /check/:a", "rlnode.forward"},
		leader:   {"rlnode.internal /internal/v1/hits", "rlnode.commit"},
	}
	proctest.Poll(t, 15*time.Second, func() error {
		for n, names := range want {
			got := rec.names(n.ID, traceID)
			for _, name := range names {
				if !got[name] {
					return fmt.Errorf("node %s exported no span %q in trace %s (has %v)", n.ID, name, traceID, got)
				}
			}
		}
		return nil
	})
}
