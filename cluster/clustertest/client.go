package clustertest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"
)

// CheckResponse is what GET /check/:client answered.
type CheckResponse struct {
	Status   int
	ServedBy string
	Header   http.Header
	Body     struct {
		Allowed      bool   `json:"allowed"`
		Remaining    int64  `json:"remaining"`
		ResetAt      int64  `json:"resetAt"`
		Limit        int64  `json:"limit"`
		WindowMs     int64  `json:"windowMs"`
		RetryAfterMs int64  `json:"retryAfterMs"`
		Code         string `json:"code"`
		Detail       string `json:"detail"`
	}
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

// Hit calls GET /check/:client on n over real HTTP.
func Hit(t testing.TB, n *Node, client string) CheckResponse {
	t.Helper()
	var r CheckResponse
	resp, err := httpClient.Get(n.URL() + "/check/" + url.PathEscape(client))
	if err != nil {
		t.Fatalf("hit %s on %s: %v", client, n.ID, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r.Status, r.Header, r.ServedBy = resp.StatusCode, resp.Header, resp.Header.Get("X-Rlnode-Served-By")
	if err := json.Unmarshal(b, &r.Body); err != nil {
		t.Fatalf("hit %s on %s: status %d, body %q: %v", client, n.ID, resp.StatusCode, b, err)
	}
	return r
}

// MustAllow fails unless a hit is allowed with the given remaining budget.
func MustAllow(t testing.TB, n *Node, client string, remaining int64) CheckResponse {
	t.Helper()
	r := Hit(t, n, client)
	if r.Status != http.StatusOK || !r.Body.Allowed || r.Body.Remaining != remaining {
		t.Fatalf("hit %s via %s: status %d %+v, want 200 with remaining %d", client, n.ID, r.Status, r.Body, remaining)
	}
	return r
}

// MustRefuse fails unless a hit is refused with 429.
func MustRefuse(t testing.TB, n *Node, client string) CheckResponse {
	t.Helper()
	r := Hit(t, n, client)
	if r.Status != http.StatusTooManyRequests || r.Body.Allowed {
		t.Fatalf("hit %s via %s: status %d %+v, want 429", client, n.ID, r.Status, r.Body)
	}
	return r
}

// Spend uses up client's whole budget through n.
func Spend(t testing.TB, n *Node, client string, limit int64) {
	t.Helper()
	for i := limit - 1; i >= 0; i-- {
		MustAllow(t, n, client, i)
	}
	MustRefuse(t, n, client)
}

// String describes a response for failure messages.
func (r CheckResponse) String() string {
	return fmt.Sprintf("%d served-by=%s %+v", r.Status, r.ServedBy, r.Body)
}
