package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/httpapi/apitest"
)

func doHeaders(t *testing.T, method, url string, header ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader("a body forward-auth ignores"))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, header: resp.Header}
	decodeInto(t, resp, &a)
	return a
}

func TestForwardAuth(t *testing.T) {
	// One node: forward-auth calls the same check as /check, whose
	// forwarding is tested on three nodes elsewhere; a single node keeps
	// this test free of elections on a loaded machine.
	c := apitest.Start(t, 1, clustertest.Options{Limit: 2, Window: time.Minute})
	n := c.Leader(10 * time.Second)
	url := n.URL() + "/v1/auth/default?key=header:X-Api-Key"

	// Every method; the body is ignored. Allowed answers are 200 with the
	// headers a proxy copies upstream.
	for i, method := range []string{"GET", "POST"} {
		a := doHeaders(t, method, url, "X-Api-Key", "k1")
		if a.status != 200 || a.body["allowed"] != true {
			t.Fatalf("%s under the limit: %d %s", method, a.status, a.raw)
		}
		if got, want := a.header.Get("X-RateLimit-Remaining"), []string{"1", "0"}[i]; got != want {
			t.Fatalf("remaining %q, want %s", got, want)
		}
		if a.header.Get("RateLimit") == "" || a.header.Get("RateLimit-Policy") != `"default";q=2;w=60` {
			t.Fatalf("headers %v", a.header)
		}
	}
	a := doHeaders(t, "PUT", url, "X-Api-Key", "k1")
	if a.status != 429 || a.header.Get("Retry-After") == "" || a.header.Get("X-RateLimit-Remaining") != "0" || a.body["code"] != "quota_exceeded" {
		t.Fatalf("over the limit: %d %v %s", a.status, a.header, a.raw)
	}
	// nginx's auth_request only understands 2xx/401/403.
	if a := doHeaders(t, "GET", url+"&refuse_status=403", "X-Api-Key", "k1"); a.status != 403 || a.header.Get("Retry-After") == "" {
		t.Fatalf("refuse_status=403: %d %v", a.status, a.header)
	}
	// Another key has its own budget.
	if a := doHeaders(t, "GET", url, "X-Api-Key", "k2"); a.status != 200 {
		t.Fatalf("k2: %d %s", a.status, a.raw)
	}
	// A missing source is named, with a status nginx's auth_request passes
	// on (anything but 2xx/401/403 becomes a 500 there, which a fail-open
	// proxy lets through).
	a = doHeaders(t, "GET", n.URL()+"/v1/auth/default?key=header:X-Tenant,ip", "X-Api-Key", "k1")
	if a.status != 401 || a.body["code"] != "missing_key" || !strings.Contains(a.body["detail"].(string), "header:X-Tenant") {
		t.Fatalf("missing header: %d %s", a.status, a.raw)
	}
	for _, bad := range []string{"", "cookie:x", "ip:1", "header:"} {
		if a := doHeaders(t, "GET", n.URL()+"/v1/auth/default?key="+bad); a.status != 400 {
			t.Fatalf("key=%q: %d %s", bad, a.status, a.raw)
		}
	}
	if a := doHeaders(t, "GET", n.URL()+"/v1/auth/nope?key=ip"); a.status != 404 || a.body["code"] != "unknown_policy" {
		t.Fatalf("unknown policy: %d %s", a.status, a.raw)
	}
}

// host+path keys by the original host and path (X-Forwarded-Host /
// X-Forwarded-Uri from Caddy and Traefik, the endpoint's own path from
// Envoy); the key spec can come from a header when the proxy cannot set a
// query; cost can come from a header.
func TestForwardAuthSources(t *testing.T) {
	c := apitest.Start(t, 1, clustertest.Options{Limit: 3, Window: time.Minute})
	n := c.Leader(5 * time.Second)
	base := n.URL() + "/v1/auth/default"

	a := doHeaders(t, "GET", base+"?key=host+path", "X-Forwarded-Host", "shop.example", "X-Forwarded-Uri", "/cart?id=1")
	if a.status != 200 || a.header.Get("X-Rlnode-Key") != "shop.example|/cart" || a.header.Get("X-RateLimit-Remaining") != "2" {
		t.Fatalf("host+path: %d key %q %s", a.status, a.header.Get("X-Rlnode-Key"), a.raw)
	}
	// Envoy: path_prefix /v1/auth/default, the original path appended, the
	// key spec in a header the proxy sets.
	a = doHeaders(t, "GET", base+"/cart?id=2", "X-Rlnode-Key", "host,path", "X-Forwarded-Host", "shop.example")
	if a.status != 200 || a.header.Get("X-Rlnode-Key") != "shop.example|/cart" || a.header.Get("X-RateLimit-Remaining") != "1" {
		t.Fatalf("envoy style: %d key %q %s", a.status, a.header.Get("X-Rlnode-Key"), a.raw)
	}
	a = doHeaders(t, "GET", base+"?key=header:X-Api-Key&cost=header:X-Cost", "X-Api-Key", "c", "X-Cost", "3")
	if a.status != 200 || a.header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("cost 3: %d %s", a.status, a.raw)
	}
	if a := doHeaders(t, "GET", base+"?key=header:X-Api-Key&cost=header:X-Cost", "X-Api-Key", "d", "X-Cost", "4"); a.status != 422 {
		t.Fatalf("cost 4 of 3: %d %s", a.status, a.raw)
	}
	if a := doHeaders(t, "GET", base+"?key=header:X-Api-Key&cost=header:X-Cost", "X-Api-Key", "d", "X-Cost", "x"); a.status != 400 {
		t.Fatalf("cost x: %d %s", a.status, a.raw)
	}
	// Without --trusted-proxies, X-Forwarded-For is not believed: the key is
	// the peer address.
	a = doHeaders(t, "GET", base+"?key=ip", "X-Forwarded-For", "203.0.113.9")
	if a.status != 200 || a.header.Get("X-Rlnode-Key") != "127.0.0.1" {
		t.Fatalf("untrusted XFF: %d key %q", a.status, a.header.Get("X-Rlnode-Key"))
	}
}

func decodeInto(t *testing.T, resp *http.Response, a *answer) {
	t.Helper()
	b, _ := io.ReadAll(resp.Body)
	a.raw = string(b)
	if err := json.Unmarshal(b, &a.body); err != nil {
		t.Fatalf("body is not JSON (%v): %q", err, b)
	}
}
