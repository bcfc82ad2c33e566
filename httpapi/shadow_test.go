package httpapi_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/httpapi/apitest"
)

// TestShadowPolicyNeverRefuses: a shadow policy answers 200 on /check,
// forward-auth and POST /v1/check where enforcing would refuse, with
// X-Rlnode-Shadow: would-refuse and "wouldRefuse": true, and the refused
// hits do not count (the header's remaining stays 0, never negative);
// calendar and shadow options come back on GET, and bad ones are a 400
// naming the field.
func TestShadowPolicyNeverRefuses(t *testing.T) {
	c := apitest.Start(t, 1, clustertest.Options{Limit: 2, Window: time.Minute})
	n := c.Leader(5 * time.Second)
	if a := do(t, "PUT", n.URL()+"/v1/policies/sh", "", `{"algorithm":"fixed_window","mode":"shadow","limits":[{"limit":2,"window":"1m"}]}`); a.status/100 != 2 {
		t.Fatalf("put shadow policy: %d %s", a.status, a.raw)
	}
	for i := range 2 {
		if a := do(t, "GET", n.URL()+"/check/sh/u", "", ""); a.status != 200 || a.header.Get("X-Rlnode-Shadow") != "" || a.body["wouldRefuse"] != nil {
			t.Fatalf("hit %d: %d %v %s", i, a.status, a.header, a.raw)
		}
	}
	wouldRefuse := func(what string, a answer) {
		t.Helper()
		if a.status != 200 || a.header.Get("X-Rlnode-Shadow") != "would-refuse" || a.header.Get("Retry-After") != "" {
			t.Fatalf("%s: %d %v %s; want 200 with X-Rlnode-Shadow: would-refuse", what, a.status, a.header, a.raw)
		}
	}
	for _, url := range []string{"/check/sh/u", "/check/sh/u?cost=3", "/v1/auth/sh?key=header:X-Api-Key"} {
		a := doHeaders(t, "GET", n.URL()+url, "X-Api-Key", "u")
		wouldRefuse(url, a)
		if a.body["wouldRefuse"] != true || a.body["allowed"] != true || a.body["remaining"] != 0.0 || a.header.Get("X-RateLimit-Remaining") != "0" {
			t.Fatalf("%s: body %s, remaining header %q", url, a.raw, a.header.Get("X-RateLimit-Remaining"))
		}
	}
	a := do(t, "POST", n.URL()+"/v1/check", "", `{"hits":[{"policy":"sh","client":"u"},{"client":"v"}]}`)
	wouldRefuse("POST /v1/check", a)
	res := a.body["results"].([]any)
	if a.body["allowed"] != true || res[0].(map[string]any)["wouldRefuse"] != true || res[1].(map[string]any)["wouldRefuse"] != nil {
		t.Fatalf("POST /v1/check: %s", a.raw)
	}
	// The default policy's hit in that check counted: the shadow refusal
	// did not fail the group.
	if a := do(t, "GET", n.URL()+"/check/v", "", ""); a.body["remaining"] != 0.0 {
		t.Fatalf("default policy after the group: %s", a.raw)
	}

	// The top keys list would-refuse hits apart (recorded asynchronously).
	clustertest.Poll(t, 10*time.Second, func() error {
		a := do(t, "GET", n.URL()+"/v1/top?policy=sh&by=would_refuse", "", "")
		if a.status != 200 || !strings.Contains(a.raw, `"wouldRefuse":4`) || !strings.Contains(a.raw, `"key":"u"`) {
			return fmt.Errorf("top: %d %s", a.status, a.raw)
		}
		return nil
	})

	cal := `{"algorithm":"fixed_window","align":"calendar","timezone":"Europe/Berlin","mode":"shadow","limits":[{"limit":1000,"window":"1mo"}]}`
	if a := do(t, "PUT", n.URL()+"/v1/policies/monthly", "", cal); a.status/100 != 2 {
		t.Fatalf("put calendar policy: %d %s", a.status, a.raw)
	}
	if a := do(t, "GET", n.URL()+"/v1/policies/monthly", "", ""); a.body["align"] != "calendar" || a.body["timezone"] != "Europe/Berlin" ||
		a.body["mode"] != "shadow" || !strings.Contains(a.raw, `"window":"1mo"`) {
		t.Fatalf("get calendar policy: %s", a.raw)
	}
	two := `{"algorithm":"fixed_window","align":"calendar","limits":[{"limit":1000,"window":"1mo"},{"limit":100,"window":"1d"}]}`
	if a := do(t, "PUT", n.URL()+"/v1/policies/cal2", "", two); a.status/100 != 2 {
		t.Fatalf("put two-limit calendar policy: %d %s", a.status, a.raw)
	}
	if a := do(t, "GET", n.URL()+"/check/cal2/x", "", ""); a.status != 200 ||
		!strings.Contains(a.header.Get("RateLimit-Policy"), `"cal2-1mo";q=1000;w=2629746, "cal2-1d";q=100;w=86400`) {
		t.Fatalf("calendar check: %d %v %s", a.status, a.header, a.raw)
	}
	for body, want := range map[string]string{
		`{"algorithm":"fixed_window","align":"calendar","timezone":"Mars/Base","limits":[{"limit":1,"window":"1mo"}]}`: `timezone \"Mars/Base\"`,
		`{"algorithm":"fixed_window","limits":[{"limit":1,"window":"1mo"}]}`:                                           `limits[0].window 1mo is a calendar period`,
		`{"algorithm":"fixed_window","mode":"loud","limits":[{"limit":1,"window":"1m"}]}`:                              `mode \"loud\" is unknown`,
	} {
		if a := do(t, "PUT", n.URL()+"/v1/policies/bad", "", body); a.status != 400 || !strings.Contains(a.raw, want) {
			t.Errorf("%s: %d %s; want 400 naming %s", body, a.status, a.raw, want)
		}
	}
}
