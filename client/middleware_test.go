package client_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/rlnode/rlnode/client"
	"github.com/rlnode/rlnode/client/ginrl"
	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/httpapi/apitest"
)

type reply struct {
	status int
	header http.Header
	body   map[string]any
}

func get(t *testing.T, url string, header ...string) reply {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, header: resp.Header, body: map[string]any{}}
	json.Unmarshal(b, &r.body)
	return r
}

// upstream answers 200 {"ok":true} and counts its calls.
func upstream(calls *atomic.Int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	})
}

func TestMiddleware(t *testing.T) {
	cl := apitest.Start(t, 3, clustertest.Options{Limit: 2, Window: time.Minute})
	c := newClient(t, client.Config{Addrs: []string{cl.Nodes[1].HTTPAddr}})
	var calls atomic.Int32
	srv := httptest.NewServer(client.Middleware(c, "default", client.KeyHeader("X-Api-Key"))(upstream(&calls)))
	defer srv.Close()

	for want := 1; want >= 0; want-- {
		r := get(t, srv.URL, "X-Api-Key", "k1")
		if r.status != 200 || r.body["ok"] != true {
			t.Fatalf("under the limit: %d %v", r.status, r.body)
		}
		if got := r.header.Get("X-RateLimit-Remaining"); got != string(rune('0'+want)) {
			t.Fatalf("X-RateLimit-Remaining %q, want %d", got, want)
		}
		if !strings.HasPrefix(r.header.Get("RateLimit-Policy"), `"default";q=2;w=60`) || !strings.Contains(r.header.Get("RateLimit"), ";r=") {
			t.Fatalf("RateLimit headers: %q / %q", r.header.Get("RateLimit-Policy"), r.header.Get("RateLimit"))
		}
	}
	r := get(t, srv.URL, "X-Api-Key", "k1")
	if r.status != 429 || r.header.Get("Retry-After") == "" || r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("over the limit: %d %v %v", r.status, r.header, r.body)
	}
	if r.body["code"] != "quota_exceeded" || r.header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("over the limit body %v", r.body)
	}
	if calls.Load() != 2 {
		t.Fatalf("upstream called %d times, want 2", calls.Load())
	}
	// No key: 400, never counted, upstream not called.
	if r := get(t, srv.URL); r.status != 400 || !strings.Contains(r.body["detail"].(string), "X-Api-Key") {
		t.Fatalf("no key: %d %v", r.status, r.body)
	}
	if calls.Load() != 2 {
		t.Fatalf("upstream called %d times, want 2", calls.Load())
	}
}

// When the cluster cannot answer, the chosen fail mode decides.
func TestMiddlewareFailModes(t *testing.T) {
	c := newClient(t, client.Config{Addrs: []string{deadAddr(t)}, Timeout: 200 * time.Millisecond})
	var calls atomic.Int32
	var hooked atomic.Int32
	hook := client.WithErrorHook(func(*http.Request, error) { hooked.Add(1) })
	closed := httptest.NewServer(client.Middleware(c, "default", client.KeyRemoteIP, hook)(upstream(&calls)))
	defer closed.Close()
	open := httptest.NewServer(client.Middleware(c, "default", client.KeyRemoteIP, client.WithFailMode(client.FailOpen), hook)(upstream(&calls)))
	defer open.Close()

	r := get(t, closed.URL)
	if r.status != 503 || r.header.Get("Retry-After") == "" || r.body["code"] != "rate_limiter_unavailable" || calls.Load() != 0 {
		t.Fatalf("fail closed: %d %v, upstream calls %d", r.status, r.body, calls.Load())
	}
	r = get(t, open.URL)
	if r.status != 200 || calls.Load() != 1 || r.header.Get("RateLimit") != "" {
		t.Fatalf("fail open: %d %v, upstream calls %d", r.status, r.header, calls.Load())
	}
	if hooked.Load() != 2 {
		t.Fatalf("error hook saw %d errors, want 2", hooked.Load())
	}
}

func TestGinAdapter(t *testing.T) {
	cl := apitest.Start(t, 1, clustertest.Options{Limit: 1, Window: time.Minute})
	c := newClient(t, client.Config{Addrs: []string{cl.Nodes[0].HTTPAddr}})
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	var calls atomic.Int32
	e.GET("/x", ginrl.Middleware(c, "default", client.KeyHeader("X-User")), func(gc *gin.Context) {
		calls.Add(1)
		gc.JSON(200, gin.H{"ok": true})
	})
	srv := httptest.NewServer(e)
	defer srv.Close()
	if r := get(t, srv.URL+"/x", "X-User", "u"); r.status != 200 || r.header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("first: %d %v", r.status, r.header)
	}
	if r := get(t, srv.URL+"/x", "X-User", "u"); r.status != 429 || r.header.Get("Retry-After") == "" {
		t.Fatalf("second: %d %v", r.status, r.header)
	}
	if calls.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1", calls.Load())
	}
}
