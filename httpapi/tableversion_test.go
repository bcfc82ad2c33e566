package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/httpapi"
	"github.com/rlnode/rlnode/policy"
)

// replaceNode answers a whole-table write as a leader whose table is
// version "v1", and records the version each write named.
type replaceNode struct {
	fakeNode
	named []string
}

func (r *replaceNode) ReplacePolicies(_ context.Context, ps []policy.Policy, ifMatch string) (cluster.TableChange, error) {
	r.named = append(r.named, ifMatch)
	if ifMatch != "v1" && ifMatch != cluster.AnyVersion {
		return cluster.TableChange{}, fmt.Errorf("replace the policy table: %w: it was computed from version %s", cluster.ErrTableChanged, ifMatch)
	}
	return cluster.TableChange{Version: "v2"}, nil
}

// PUT /v1/policies takes the version from If-Match as GET's ETag gives it
// (or "*"), refuses a write naming none (428) or one it cannot read (400),
// and answers a stale one 409 table_changed.
func TestReplaceNamesTheTableVersion(t *testing.T) {
	n := &replaceNode{}
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Node: n, Token: "s3cret"}).Handler())
	t.Cleanup(srv.Close)
	url := srv.URL
	body := `{"policies":[{"name":"default","algorithm":"fixed_window","limits":[{"limit":5,"window":"1m"}]}]}`
	put := func(ifMatch string) answer {
		t.Helper()
		req, err := http.NewRequest("PUT", url+"/v1/policies", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer s3cret")
		if ifMatch != "" {
			req.Header.Set("If-Match", ifMatch)
		}
		return send(t, req)
	}
	if a := put(""); a.status != 428 || a.body["code"] != "precondition_required" {
		t.Errorf("no If-Match: %d %s", a.status, a.raw)
	}
	for _, bad := range []string{`W/"v1"`, `"v1", "v2"`, `""`} {
		if a := put(bad); a.status != 400 || a.body["code"] != "invalid_request" {
			t.Errorf("If-Match: %s: %d %s", bad, a.status, a.raw)
		}
	}
	if a := put(`"v0"`); a.status != 409 || a.body["code"] != "table_changed" {
		t.Errorf("a stale version: %d %s", a.status, a.raw)
	}
	for _, ok := range []string{`"v1"`, `v1`, `*`} {
		if a := put(ok); a.status != 200 || a.header.Get("ETag") != `"v2"` || a.body["version"] != "v2" {
			t.Errorf("If-Match: %s: %d %s %v", ok, a.status, a.raw, a.header)
		}
	}
	if want := "v0 v1 v1 *"; strings.Join(n.named, " ") != want {
		t.Errorf("the node was asked with %q, want %q (nothing for the refused ones)", n.named, want)
	}
}
