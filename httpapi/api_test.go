package httpapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/httpapi/apitest"
)

type answer struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func do(t *testing.T, method, url, token, body string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return send(t, req)
}

// send sends req and reads its JSON answer.
func send(t *testing.T, req *http.Request) answer {
	t.Helper()
	method, url := req.Method, req.URL.String()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header, raw: string(b)}
	if err := json.Unmarshal(b, &a.body); err != nil {
		t.Fatalf("%s %s: body is not JSON (%v): %q", method, url, err, b)
	}
	return a
}

func TestCheckHeadersAndProblemBodies(t *testing.T) {
	c := apitest.Start(t, 1, clustertest.Options{Limit: 2, Window: 90 * time.Second})
	n := c.Leader(5 * time.Second)
	a := do(t, "GET", n.URL()+"/check/ann", "", "")
	if a.status != 200 || a.body["allowed"] != true || a.body["remaining"] != 1.0 || a.body["limit"] != 2.0 || a.body["windowMs"] != 90000.0 {
		t.Fatalf("first hit: %d %s", a.status, a.raw)
	}
	for k, want := range map[string]string{
		"RateLimit-Policy": `"default";q=2;w=90`, "RateLimit": `"default";r=1;t=90`,
		"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "Cache-Control": "no-store", "X-Rlnode-Served-By": n.ID,
	} {
		if got := a.header.Get(k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	resetAt := int64(a.body["resetAt"].(float64))
	if got := a.header.Get("X-RateLimit-Reset"); got != strings.TrimSpace(jsonInt((resetAt+999)/1000)) {
		t.Errorf("X-RateLimit-Reset %q does not match resetAt %d", got, resetAt)
	}
	do(t, "GET", n.URL()+"/check/ann", "", "")
	a = do(t, "GET", n.URL()+"/check/ann", "", "")
	if a.status != 429 || a.body["allowed"] != false || a.body["remaining"] != 0.0 ||
		a.body["type"] != "https://iana.org/assignments/http-problem-types#quota-exceeded" || a.body["title"] == nil || a.body["detail"] == nil {
		t.Fatalf("third hit: %d %s", a.status, a.raw)
	}
	if ct := a.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Errorf("429 content type %q", ct)
	}
	if ra := a.header.Get("Retry-After"); ra != "90" && ra != "89" {
		t.Errorf("Retry-After %q, want whole seconds until reset", ra)
	}
	if ms, ok := a.body["retryAfterMs"].(float64); !ok || ms <= 0 || ms > 90000 {
		t.Errorf("retryAfterMs %v", a.body["retryAfterMs"])
	}
	if int64(a.body["resetAt"].(float64)) != resetAt {
		t.Errorf("resetAt moved within one window")
	}
}

func jsonInt(v int64) string { b, _ := json.Marshal(v); return string(b) }

func TestBadInputGetsClearErrorsAndChangesNothing(t *testing.T) {
	c := apitest.Start(t, 1, clustertest.Options{Limit: 3, Token: "s3cret"})
	n := c.Leader(5 * time.Second)
	before := n.Status()
	cases := []struct {
		name, method, path, token, body string
		status                          int
		code                            string
	}{
		{"empty client", "GET", "/check/", "", "", 400, "invalid_client"},
		{"no client", "GET", "/check", "", "", 400, "invalid_client"},
		{"oversized client", "GET", "/check/" + strings.Repeat("x", 257), "", "", 400, "invalid_client"},
		{"invalid utf-8", "GET", "/check/%ff%fe", "", "", 400, "invalid_client"},
		{"control character", "GET", "/check/a%00b", "", "", 400, "invalid_client"},
		{"newline", "GET", "/check/a%0Ab", "", "", 400, "invalid_client"},
		{"cost not a number", "GET", "/check/ok?cost=abc", "", "", 400, "invalid_request"},
		{"cost zero", "GET", "/check/ok?cost=0", "", "", 400, "invalid_request"},
		{"cost negative", "GET", "/check/ok?cost=-3", "", "", 400, "invalid_request"},
		{"cost above limit", "GET", "/check/ok?cost=4", "", "", 422, "cost_exceeds_limit"},
		{"peek bad id", "GET", "/v1/status/%ff", "", "", 400, "invalid_client"},
		{"unknown route", "GET", "/nope", "", "", 404, "not_found"},
		{"wrong method", "POST", "/check/x", "", "", 405, "invalid_request"},
		{"join without token", "POST", "/v1/cluster/join", "", `{"id":"x","raftAddr":"127.0.0.1:1","httpAddr":"127.0.0.1:2"}`, 401, "unauthorized"},
		{"join wrong token", "POST", "/v1/cluster/join", "nope", `{"id":"x","raftAddr":"127.0.0.1:1","httpAddr":"127.0.0.1:2"}`, 401, "unauthorized"},
		{"join malformed json", "POST", "/v1/cluster/join", "s3cret", `{"id":`, 400, "invalid_request"},
		{"join unknown field", "POST", "/v1/cluster/join", "s3cret", `{"id":"x","raftAddr":"a","httpAddr":"b","colour":1}`, 400, "invalid_request"},
		{"join missing fields", "POST", "/v1/cluster/join", "s3cret", `{"id":"x"}`, 400, "invalid_request"},
		// An id the log's decoder refuses would halt every replica at
		// that entry, at every restart: refused before it is written.
		{"join id with a control character", "POST", "/v1/cluster/join", "s3cret", `{"id":"evil\r","raftAddr":"127.0.0.1:1","httpAddr":"127.0.0.1:2","voter":false}`, 400, "invalid_request"},
		{"join oversized address", "POST", "/v1/cluster/join", "s3cret", `{"id":"x","raftAddr":"` + strings.Repeat("a", 513) + `","httpAddr":"127.0.0.1:2"}`, 400, "invalid_request"},
		{"join oversized body", "POST", "/v1/cluster/join", "s3cret", `{"id":"` + strings.Repeat("x", 2<<20) + `"}`, 413, "invalid_request"},
		{"remove without id", "POST", "/v1/cluster/remove", "s3cret", `{}`, 400, "invalid_request"},
		{"remove unknown", "POST", "/v1/cluster/remove", "s3cret", `{"id":"ghost"}`, 404, "not_found"},
		{"snapshot without token", "POST", "/v1/cluster/snapshot", "", "", 401, "unauthorized"},
		{"forward without token", "POST", "/internal/v1/hits", "", "garbage", 401, "unauthorized"},
		{"forward garbage", "POST", "/internal/v1/hits", "s3cret", "garbage", 400, "invalid_request"},
		{"clock offset not a number", "POST", "/debug/clock-offset", "s3cret", `{"offsetMs":"x"}`, 400, "invalid_request"},
		// encoding/json would count these as client "\ufffd".
		{"check body invalid utf-8", "POST", "/v1/check", "", "{\"hits\":[{\"client\":\"a\xffb\"}]}", 400, "invalid_request"},
		{"check body lone high surrogate", "POST", "/v1/check", "", `{"hits":[{"client":"\ud800"}]}`, 400, "invalid_request"},
		{"check body lone low surrogate", "POST", "/v1/check", "", `{"hits":[{"client":"x\uDC00"}]}`, 400, "invalid_request"},
		{"check body high surrogate then letter", "POST", "/v1/check", "", `{"hits":[{"client":"\uD83D\u0041"}]}`, 400, "invalid_request"},
		{"check body surrogate at the end", "POST", "/v1/check", "", `{"hits":[{"client":"\ud83d`, 400, "invalid_request"},
		{"join body lone surrogate", "POST", "/v1/cluster/join", "s3cret", `{"id":"\ud800","raftAddr":"127.0.0.1:1","httpAddr":"127.0.0.1:2"}`, 400, "invalid_request"},
		{"put policy invalid utf-8", "PUT", "/v1/policies/p1", "s3cret", "{\"algorithm\":\"fixed_window\",\"limits\":[{\"limit\":1,\"window\":\"1s\"}],\"envoy\":{\"domain\":\"d\xff\",\"descriptors\":[{\"key\":\"k\"}]}}", 400, "invalid_request"},
		{"put policy lone surrogate", "PUT", "/v1/policies/p1", "s3cret", `{"algorithm":"fixed_window","limits":[{"limit":1,"window":"1s"}],"envoy":{"domain":"\udfff","descriptors":[{"key":"k"}]}}`, 400, "invalid_request"},
		// A name longer than any policy's is unknown wherever it is given.
		{"reset policy too long", "DELETE", "/v1/windows/" + strings.Repeat("a", 65) + "/client1", "s3cret", "", 404, "unknown_policy"},
		{"reset policy bad character", "DELETE", "/v1/windows/a%20b/client1", "s3cret", "", 404, "unknown_policy"},
		{"status policy too long", "GET", "/v1/status/" + strings.Repeat("a", 65) + "/client1", "", "", 404, "unknown_policy"},
		{"check policy too long", "GET", "/check/" + strings.Repeat("a", 65) + "/client1", "", "", 404, "unknown_policy"},
		{"auth policy too long", "GET", "/v1/auth/" + strings.Repeat("a", 65) + "?key=ip", "", "", 404, "unknown_policy"},
		{"multi check policy too long", "POST", "/v1/check", "", `{"hits":[{"policy":"` + strings.Repeat("a", 65) + `","client":"c"}]}`, 400, "invalid_request"},
		{"get policy too long", "GET", "/v1/policies/" + strings.Repeat("a", 65), "", "", 404, "unknown_policy"},
		{"delete policy too long", "DELETE", "/v1/policies/" + strings.Repeat("a", 65), "s3cret", "", 404, "unknown_policy"},
		{"put policy too long", "PUT", "/v1/policies/" + strings.Repeat("a", 65), "s3cret", `{"algorithm":"fixed_window","limits":[{"limit":1,"window":"1s"}]}`, 400, "invalid_request"},
	}
	for _, tc := range cases {
		a := do(t, tc.method, n.URL()+tc.path, tc.token, tc.body)
		if a.status != tc.status || a.body["code"] != tc.code || a.body["detail"] == "" {
			t.Errorf("%s: %d %s; want %d code %s with a detail", tc.name, a.status, a.raw, tc.status, tc.code)
		}
	}
	if after := n.Status(); after.LastLogIndex != before.LastLogIndex {
		t.Fatalf("bad input wrote %d log entries", after.LastLogIndex-before.LastLogIndex)
	}
	// Open endpoints never need the token.
	for _, p := range []string{"/check/fine", "/livez", "/healthz", "/readyz", "/v1/status/fine"} {
		if a := do(t, "GET", n.URL()+p, "", ""); a.status != 200 {
			t.Errorf("GET %s without token: %d %s", p, a.status, a.raw)
		}
	}
	if a := do(t, "POST", n.URL()+"/v1/cluster/snapshot", "s3cret", ""); a.status != 200 {
		t.Errorf("snapshot with token: %d %s", a.status, a.raw)
	}
}

// The text check that refuses lone surrogates must not refuse what is
// valid: a surrogate pair, an escaped backslash before "u", other escapes.
func TestCheckBodyKeepsValidEscapes(t *testing.T) {
	c := apitest.Start(t, 1, clustertest.Options{Limit: 3})
	n := c.Leader(5 * time.Second)
	for body, client := range map[string]string{
		`{"hits":[{"client":"\ud83d\ude00"}]}`:    "\U0001F600",
		`{"hits":[{"client":"a\\ud800"}]}`:        `a\ud800`,
		`{"hits":[{"client":"\u00e9\/\"x\""}]}`:   "\u00e9/\"x\"",
		"{\"hits\":[{\"client\":\"caf\u00e9\"}]}": "caf\u00e9",
	} {
		a := do(t, "POST", n.URL()+"/v1/check", "", body)
		results, _ := a.body["results"].([]any)
		if a.status != 200 || len(results) != 1 {
			t.Errorf("%s: %d %s", body, a.status, a.raw)
			continue
		}
		if got := results[0].(map[string]any)["client"]; got != client {
			t.Errorf("%s: counted as client %q, want %q", body, got, client)
		}
	}
}

func TestReadyzFollowsTheLeader(t *testing.T) {
	c := apitest.Start(t, 3, clustertest.Options{})
	leader := c.Leader(5 * time.Second)
	for _, n := range c.Live() {
		if a := do(t, "GET", n.URL()+"/readyz", "", ""); a.status != 200 {
			t.Fatalf("%s not ready: %s", n.ID, a.raw)
		}
	}
	f := c.Followers(leader)
	f[0].Stop()
	leader.Stop()
	// Without quorum the survivor is alive but not ready.
	clustertest.Poll(t, 10*time.Second, func() error {
		if a := do(t, "GET", f[1].URL()+"/readyz", "", ""); a.status != 503 {
			return fmt.Errorf("survivor still ready: %s", a.raw)
		}
		return nil
	})
	if a := do(t, "GET", f[1].URL()+"/livez", "", ""); a.status != 200 {
		t.Fatalf("livez depends on quorum: %s", a.raw)
	}
}
