package httpapi_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/httpapi"
	"github.com/rlnode/rlnode/httpapi/apitest"
	"github.com/rlnode/rlnode/policy"
)

// discardWriter is a ResponseWriter that keeps only the status and the
// header map. Each request gets a fresh map, as net/http gives each
// response: growing it past eight keys is part of what an answer costs.
type discardWriter struct {
	h      http.Header
	status int
	// wire: do per answer what net/http does with a header map the
	// handler touched: clone it when the status is written
	// (response.WriteHeader) and write it sorted (Header.WriteSubset, in
	// chunkWriter.writeHeader). That part of an answer's cost grows with
	// its header count, and a discarding writer would skip it.
	wire bool
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(s int) {
	w.status = s
	if w.wire {
		_ = w.h.Clone().WriteSubset(io.Discard, nil)
	}
}

// benchNode is a one-node cluster (real Raft, real data dir) with a strict
// and a leased policy whose limits are never reached, and the public
// handler served in process.
func benchNode(b *testing.B) (*clustertest.Node, http.Handler) {
	leased := policy.Fixed("leased", policy.MaxLimit, time.Hour)
	leased.Consistency = policy.Leased
	c := apitest.Start(b, 1, clustertest.Options{Policies: []policy.Policy{policy.Fixed("strict", policy.MaxLimit, time.Hour), leased}})
	n := c.Leader(10 * time.Second)
	return n, benchHandler(n, httpapi.HeadersBoth)
}

// benchHandler is the public handler of n answering with the given
// rate-limit headers.
func benchHandler(n *clustertest.Node, set httpapi.HeaderSet) http.Handler {
	return httpapi.New(httpapi.Config{Node: n.Node, RequestTimeout: 5 * time.Second, Headers: set}).Handler()
}

// serveOne runs one request through h and fails unless it was allowed.
func serveOne(b *testing.B, h http.Handler, w *discardWriter, r *http.Request) {
	w.h = make(http.Header)
	w.status = http.StatusOK
	h.ServeHTTP(w, r)
	if w.status != http.StatusOK {
		b.Fatalf("%s: status %d", r.URL, w.status)
	}
}

// BenchmarkCheckHandler measures GET /check/:policy/:client through the
// real router and node, without the network: a hot key of a leased policy
// (decided from the lease this node holds) and of a strict one (through
// the log: fsync and commit, many requests at once so they share entries).
// allocs/op is what one answer costs the heap.
func BenchmarkCheckHandler(b *testing.B) {
	n, h := benchNode(b)
	b.Run("leased-hot", func(b *testing.B) { benchLeasedHot(b, h, false) })
	// The same with net/http's per-answer header work (discardWriter.wire),
	// per --headers choice.
	for _, set := range []httpapi.HeaderSet{httpapi.HeadersBoth, httpapi.HeadersIETF, httpapi.HeadersLegacy} {
		hs := benchHandler(n, set)
		b.Run("leased-hot-wire/"+set.String(), func(b *testing.B) { benchLeasedHot(b, hs, true) })
	}
	b.Run("strict-hot", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(32) // the leader batches what arrives together
		b.RunParallel(func(pb *testing.PB) {
			r := httptest.NewRequest("GET", "/check/strict/hot", nil)
			w := &discardWriter{h: http.Header{}}
			for pb.Next() {
				serveOne(b, h, w, r)
			}
		})
	})
	b.Run("livez", func(b *testing.B) {
		r := httptest.NewRequest("GET", "/livez", nil)
		w := &discardWriter{h: http.Header{}}
		b.ReportAllocs()
		for range b.N {
			serveOne(b, h, w, r)
		}
	})
}

// benchLeasedHot answers GET /check/leased/hot through h, decided from
// the lease this node holds.
func benchLeasedHot(b *testing.B, h http.Handler, wire bool) {
	r := httptest.NewRequest("GET", "/check/leased/hot", nil)
	w := &discardWriter{h: http.Header{}, wire: wire}
	// Warm the key until the node holds a lease for it.
	clustertest.Poll(b, 10*time.Second, func() error {
		for range 50 {
			serveOne(b, h, w, r)
		}
		if d := w.h.Get(cluster.HeaderDecided); d != cluster.DecidedLocal {
			return errNotLocal
		}
		return nil
	})
	local := 0
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		serveOne(b, h, w, r)
		if w.h[cluster.HeaderDecided][0] == cluster.DecidedLocal {
			local++
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(local)/float64(b.N), "local/op")
}

var errNotLocal = errorString("not decided locally yet")

type errorString string

func (e errorString) Error() string { return string(e) }
