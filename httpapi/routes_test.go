package httpapi_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/rlnode/rlnode/httpapi"
)

// Every route the router serves refuses a query parameter it does not
// read, as /check?bogus=1 always did: GET /v1/top?bogus=1 was answered 200
// (issue 25 item 5). Forward-auth alone takes any: Envoy appends the
// original request's query to it.
func TestUnknownQueryParameterIsRefused(t *testing.T) {
	api := httpapi.New(httpapi.Config{Node: &fakeNode{}, Token: "s3cret", DebugEndpoints: true,
		MetricsHandler: http.NotFoundHandler()})
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)
	routes := api.Handler().(*gin.Engine).Routes()
	if len(routes) < 30 {
		t.Fatalf("only %d routes registered", len(routes))
	}
	for _, r := range routes {
		if strings.HasPrefix(r.Path, httpapi.AuthPath) {
			continue
		}
		path := r.Path
		for _, seg := range strings.Split(r.Path, "/") {
			if strings.HasPrefix(seg, ":") || strings.HasPrefix(seg, "*") {
				path = strings.Replace(path, seg, "x"+seg[1:], 1)
			}
		}
		for _, token := range []string{"", "s3cret"} {
			status, body := sendRaw(t, r.Method, srv.URL+path+"?bogus=1", token)
			if status != 400 || !strings.Contains(body, `"bogus\" is unknown`) {
				t.Errorf("%s %s?bogus=1 (token %q): %d %s; want 400 naming bogus", r.Method, path, token, status, body)
			}
		}
	}
	// Forward-auth still passes the original request's query through.
	if a := do(t, "GET", srv.URL+"/v1/auth/default?key=ip&page=2", "", ""); a.status == 400 {
		t.Errorf("forward-auth refused the original query: %s", a.raw)
	}
}

// sendRaw answers one request's status and body, following no redirect.
func sendRaw(t *testing.T, method, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
