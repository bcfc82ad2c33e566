package policy

import (
	"strings"
	"testing"
	"time"
)

// A configuration in the spirit of envoyproxy/ratelimit's examples.
const envoyExample = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  - key: path
    value: /login
    rate_limit:
      name: login
      unit: minute
      requests_per_unit: 5
  - key: tenant
    descriptors:
      - key: plan
        value: free
        rate_limit: {unit: hour, requests_per_unit: 100}
      - key: plan
        value: internal
        rate_limit: {unlimited: true}
      - key: plan
        shadow_mode: true
        detailed_metric: true
        rate_limit: {unit: day, requests_per_unit: 1000}
`

func TestParseEnvoy(t *testing.T) {
	domain, rules, err := ParseEnvoy([]byte(envoyExample))
	if err != nil {
		t.Fatal(err)
	}
	if domain != "edge" || len(rules) != 5 {
		t.Fatalf("domain %q, %d rules", domain, len(rules))
	}
	got := map[string]EnvoyRule{}
	for _, r := range rules {
		got[r.Name] = r
		if p := r.Policy(false); p.Validate() != nil {
			t.Errorf("%s: %v", r.Name, p.Validate())
		}
	}
	for name, want := range map[string]struct {
		limit int64
		w     time.Duration
	}{
		"envoy:edge.remote_address":       {10, time.Second},
		"envoy:edge.path_/login":          {0, 0},
		"envoy:edge.tenant.plan_free":     {100, time.Hour},
		"envoy:edge.tenant.plan_internal": {MaxLimit, time.Second},
		"envoy:edge.tenant.plan":          {1000, 24 * time.Hour},
	} {
		r, ok := got[name]
		if name == "envoy:edge.path_/login" {
			// '/' is not allowed in a policy name: hashed.
			continue
		}
		if !ok || r.Limit != want.limit || r.Window != want.w {
			t.Errorf("%s: %+v, want %d per %s (rules %v)", name, r, want.limit, want.w, got)
		}
	}
	var login EnvoyRule
	for _, r := range rules {
		if r.Envoy.Name == "login" {
			login = r
		}
	}
	if !strings.HasPrefix(login.Name, "envoy:edge.path_-login-") || ValidateName(login.Name) != nil || login.Limit != 5 || login.Window != time.Minute {
		t.Errorf("login rule %+v", login)
	}
	shadow := got["envoy:edge.tenant.plan"].Envoy
	if !shadow.ShadowMode || !shadow.DetailedMetric || len(shadow.Descriptors) != 2 || shadow.Descriptors[1].Key != "plan" || shadow.Descriptors[1].Value != "" {
		t.Errorf("shadow rule %+v", shadow)
	}
	if !got["envoy:edge.tenant.plan_internal"].Envoy.Unlimited {
		t.Error("unlimited lost")
	}
}

func TestParseEnvoyErrors(t *testing.T) {
	for name, doc := range map[string]string{
		"no domain":      "descriptors: []",
		"unknown field":  "domain: d\ndescriptors:\n  - key: a\n    rate: 1",
		"bad unit":       "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}",
		"zero":           "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 0}",
		"empty key":      "domain: d\ndescriptors:\n  - value: a",
		"duplicate":      "domain: d\ndescriptors:\n  - key: a\n  - key: a",
		"unlimited+unit": "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, unlimited: true}",
		"not yaml":       "{{{",
	} {
		if _, _, err := ParseEnvoy([]byte(doc)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// The match travels with the policy through a PUT body.
func TestParseOneWithEnvoy(t *testing.T) {
	p, err := ParseOne("envoy:d.a", []byte(`{"algorithm":"fixed_window","limits":[{"limit":3,"window":"1s"}],"envoy":{"domain":"d","descriptors":[{"key":"a"}],"unit":"SECOND","requestsPerUnit":3,"shadowMode":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := &Envoy{Domain: "d", Descriptors: []EnvoyEntry{{Key: "a"}}, Unit: "SECOND", RequestsPerUnit: 3, ShadowMode: true}
	if !p.Envoy.Equal(want) {
		t.Fatalf("%+v", p.Envoy)
	}
	if _, err := ParseOne("x", []byte(`{"algorithm":"fixed_window","limits":[{"limit":3,"window":"1s"}],"envoy":{"domian":"d"}}`)); err == nil {
		t.Fatal("a misspelt envoy field was accepted")
	}
}
