package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/wire"
	"github.com/rlnode/rlnode/window"
)

// referenceRateLimitHeaders is setRateLimitHeaders as it was before it
// wrote the header map directly: Header.Set and one string per value.
func referenceRateLimitHeaders(h http.Header, now int64, servedBy string, hr cluster.HitResult) {
	h.Set("Cache-Control", "no-store")
	h.Set(cluster.HeaderServedBy, servedBy)
	var pol, rl []byte
	for i, p := range hr.Parts {
		if i > 0 {
			pol = append(pol, ", "...)
			rl = append(rl, ", "...)
		}
		name := hr.Policy
		if len(hr.Parts) > 1 {
			name += "-" + shortWindow(p.WindowMs)
		}
		pol = strconv.AppendQuote(pol, name)
		rl = strconv.AppendQuote(rl, name)
		pol = append(pol, ";q="...)
		pol = strconv.AppendInt(pol, p.Limit, 10)
		pol = append(pol, ";w="...)
		pol = strconv.AppendInt(pol, (p.WindowMs+999)/1000, 10)
		rl = append(rl, ";r="...)
		rl = strconv.AppendInt(rl, p.Remaining, 10)
		rl = append(rl, ";t="...)
		rl = strconv.AppendInt(rl, max(0, (p.ResetAt-now+999)/1000), 10)
	}
	h.Set("RateLimit-Policy", string(pol))
	h.Set("RateLimit", string(rl))
	m := hr.MainPart()
	h.Set("X-RateLimit-Limit", strconv.FormatInt(m.Limit, 10))
	h.Set("X-RateLimit-Remaining", strconv.FormatInt(m.Remaining, 10))
	h.Set("X-RateLimit-Reset", strconv.FormatInt((m.ResetAt+999)/1000, 10))
}

// TestRateLimitHeadersMatchReference checks the direct-map writer stores
// exactly the keys and values Header.Set stored, for one- and multi-limit
// policies, odd names, zero and huge numbers, and resets in the past, for
// each header set (--headers both, ietf, legacy).
func TestRateLimitHeadersMatchReference(t *testing.T) {
	gin.SetMode(gin.TestMode)
	parts := []window.Result{
		{Limit: 2, WindowMs: 90_000, Remaining: 1, ResetAt: 1_700_000_090_000},
		{Limit: 0, WindowMs: 250, Remaining: 0, ResetAt: 5},
		{Limit: 1 << 62, WindowMs: 86_400_000, Remaining: 1<<62 - 1, ResetAt: 1<<62 + 12345},
		{Limit: 5, WindowMs: 3_600_000, Remaining: -3, ResetAt: 1_700_000_000_001},
		{Limit: 7, WindowMs: 1001, Remaining: 7, ResetAt: 1_699_999_999_000},
	}
	names := []string{"default", "api", `we"ird\name`, "ünïcode", ""}
	n := 0
	for _, name := range names {
		for k := 1; k <= len(parts); k++ {
			for main := 0; main < k; main++ {
				for _, now := range []int64{0, 1_700_000_000_000, 1 << 62} {
					for _, set := range []HeaderSet{HeadersBoth, HeadersIETF, HeadersLegacy} {
						hr := cluster.HitResult{Policy: name, Parts: parts[len(parts)-k:], Main: main}
						want := http.Header{}
						referenceRateLimitHeaders(want, now, "n2", hr)
						// A set is the reference without the other set's keys.
						switch set {
						case HeadersIETF:
							want.Del("X-RateLimit-Limit")
							want.Del("X-RateLimit-Remaining")
							want.Del("X-RateLimit-Reset")
						case HeadersLegacy:
							want.Del("RateLimit-Policy")
							want.Del("RateLimit")
						}
						c, _ := gin.CreateTestContext(httptest.NewRecorder())
						(&API{cfg: Config{Headers: set}}).setRateLimitHeaders(c, now, "n2", hr)
						if got := c.Writer.Header(); !reflect.DeepEqual(map[string][]string(got), map[string][]string(want)) {
							t.Fatalf("headers %s, policy %q, %d parts, main %d, now %d:\n got %q\nwant %q", set, name, k, main, now, got, want)
						}
						n++
					}
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no cases ran")
	}
}

// TestJSONRenderMatchesMarshal checks the renderer writes json.Marshal's
// bytes plus a newline, HTML escaping included, for the check bodies.
func TestJSONRenderMatchesMarshal(t *testing.T) {
	retry := int64(1500)
	start := int64(1_700_000_000_000)
	lim := []wire.LimitBody{{Limit: 5, WindowMs: 60_000, Remaining: 4, ResetAt: start + 60_000, WindowStart: &start}}
	bodies := []any{
		wire.CheckBody{Allowed: true, Remaining: 1, ResetAt: 2, Limit: 3, WindowMs: 4, Policy: "default", Limits: lim},
		wire.CheckBody{Policy: `<a&b>"\` + "\u2028ü", Client: "c<1>", Limits: nil, RetryAfterMs: &retry},
		quotaProblem{Type: "t", Title: "Request quota exceeded", Status: 429, Detail: "d & <e>", Code: CodeQuotaExceeded,
			CheckBody: wire.CheckBody{Policy: "p", Limits: lim, RetryAfterMs: &retry}},
		wire.CheckManyAnswer{Allowed: false, Results: []wire.CheckBody{{Policy: "a"}, {Policy: "b", Limits: lim}}},
	}
	for i, v := range bodies {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		if err := (jsonRender{contentType: "application/json; charset=utf-8", v: v}).Render(rec); err != nil {
			t.Fatal(err)
		}
		if got := rec.Body.String(); got != string(want)+"\n" {
			t.Errorf("body %d:\n got %q\nwant %q", i, got, string(want)+"\n")
		}
	}
}

// BenchmarkRateLimitHeaders compares the per-hit header writer with the
// Header.Set version it replaced (go test ./httpapi -run - -bench RateLimitHeaders -benchmem).
func BenchmarkRateLimitHeaders(b *testing.B) {
	gin.SetMode(gin.TestMode)
	hr := cluster.HitResult{Policy: "default", Parts: []window.Result{{Limit: 1_000_000_000, WindowMs: 60_000, Remaining: 999_999_000, ResetAt: 1_700_000_060_000}}}
	c, _ := gin.CreateTestContext(httptest.NewRecorder())
	for _, set := range []HeaderSet{HeadersBoth, HeadersIETF, HeadersLegacy} {
		a := &API{cfg: Config{Headers: set}}
		b.Run("direct-"+set.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				clear(c.Writer.Header())
				a.setRateLimitHeaders(c, 1_700_000_000_000, "n1", hr)
			}
		})
	}
	b.Run("header-set", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			clear(c.Writer.Header())
			referenceRateLimitHeaders(c.Writer.Header(), 1_700_000_000_000, "n1", hr)
		}
	})
}

// BenchmarkJSONRender compares the Encoder renderer with Marshal + append.
func BenchmarkJSONRender(b *testing.B) {
	start := int64(1_700_000_000_000)
	v := wire.CheckBody{Allowed: true, Remaining: 999_999_000, ResetAt: start + 60_000, Limit: 1_000_000_000, WindowMs: 60_000, Policy: "default",
		Limits: []wire.LimitBody{{Limit: 1_000_000_000, WindowMs: 60_000, Remaining: 999_999_000, ResetAt: start + 60_000, WindowStart: &start}}}
	w := discardWriter{http.Header{}}
	b.Run("encoder", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = jsonRender{contentType: "application/json; charset=utf-8", v: v}.Render(w)
		}
	})
	b.Run("marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			out, _ := json.Marshal(v)
			_, _ = w.Write(append(out, '\n'))
		}
	})
}

type discardWriter struct{ h http.Header }

func (d discardWriter) Header() http.Header         { return d.h }
func (d discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d discardWriter) WriteHeader(int)             {}
