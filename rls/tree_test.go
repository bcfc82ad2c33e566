package rls

import (
	"strings"
	"testing"

	"github.com/rlnode/rlnode/metrics"
)

func TestTreeMatch(t *testing.T) {
	ps := envoyPolicies(t, `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: special
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 3}
      - key: b
        value: x
        descriptors:
          - key: c
            rate_limit: {unit: second, requests_per_unit: 4}
`)
	tr := buildTree(ps)
	for _, c := range []struct {
		domain  string
		entries []entry
		want    int64 // 0: no limit
	}{
		{"d", []entry{{"k", "anything"}}, 1},
		{"d", []entry{{"k", "special"}}, 2}, // the key with this value wins
		{"d", []entry{{"a", "1"}}, 0},       // no limit where the descriptor ends
		{"d", []entry{{"a", "1"}, {"b", "y"}}, 3},
		{"d", []entry{{"a", "1"}, {"b", "x"}}, 0}, // b_x has no limit of its own, b's does not apply
		{"d", []entry{{"a", "1"}, {"b", "x"}, {"c", "z"}}, 4},
		{"d", []entry{{"a", "1"}, {"b", "y"}, {"c", "z"}}, 0}, // deeper than the config
		{"d", []entry{{"k", "v"}, {"extra", "1"}}, 0},
		{"other", []entry{{"k", "v"}}, 0},
	} {
		p := tr.match(c.domain, c.entries).pol
		got := int64(0)
		if p != nil {
			got = p.Limits[0].Limit
		}
		if got != c.want {
			t.Errorf("%s %v: limit %d, want %d", c.domain, c.entries, got, c.want)
		}
	}
}

func TestBucket(t *testing.T) {
	if got := bucket([]entry{{"a", "1"}, {"b", "x"}}, nil); got != "a_1.b_x" {
		t.Errorf("bucket %q", got)
	}
	long := make([]byte, 300)
	for i := range long {
		long[i] = 'v'
	}
	if got := bucket([]entry{{"k", string(long)}}, nil); len(got) != len("sha256:")+64 {
		t.Errorf("long bucket %q", got)
	}
	if got := bucket([]entry{{"k", "tab\there"}}, nil); got[:7] != "sha256:" {
		t.Errorf("control characters kept: %q", got)
	}
}

// A configuration exercising every matching rule of envoyproxy/ratelimit:
// wildcards (trailing, middle, several, nested, first in file order wins),
// exact values beating wildcards, share_threshold, value_to_metric,
// detailed_metric and a whitelisted value.
const wildConfig = `
domain: w
descriptors:
  - {key: client, rate_limit: {unit: minute, requests_per_unit: 20}}
  - {key: client, value: partner}
  - {key: path, value: "/api/*", rate_limit: {unit: minute, requests_per_unit: 21}}
  - {key: path, value: "/api/v2*", rate_limit: {unit: minute, requests_per_unit: 22}}
  - {key: path, value: "/api/exact", rate_limit: {unit: minute, requests_per_unit: 23}}
  - {key: sku, value: "a*z", rate_limit: {unit: minute, requests_per_unit: 24}}
  - {key: route, value: "v*/items/*/x", rate_limit: {unit: minute, requests_per_unit: 25}}
  - key: tenant
    value: "t-*"
    share_threshold: true
    descriptors:
      - {key: op, rate_limit: {unit: minute, requests_per_unit: 26}}
  - key: file
    value: "f*"
    descriptors:
      - {key: op, rate_limit: {unit: minute, requests_per_unit: 27}}
  - key: user
    value_to_metric: true
    descriptors:
      - {key: op, value: "read*", detailed_metric: true, rate_limit: {unit: minute, requests_per_unit: 28}}
      - {key: op, value: "write*", rate_limit: {unit: minute, requests_per_unit: 29}}
`

func TestTreeMatchWildcards(t *testing.T) {
	ps := envoyPolicies(t, wildConfig)
	tr := buildTree(ps)
	for _, c := range []struct {
		entries []entry
		limit   int64 // 0: not limited
		bucket  string
		metric  string
	}{
		{[]entry{{"client", "anyone"}}, 20, "client_anyone", "client"},
		{[]entry{{"client", "partner"}}, 0, "", ""}, // whitelisted: never client's 20
		{[]entry{{"path", "/api/users"}}, 21, "path_/api/users", "path_/api/*"},
		{[]entry{{"path", "/api/v2/x"}}, 21, "path_/api/v2/x", "path_/api/*"}, // the first wildcard in the file wins
		{[]entry{{"path", "/api/exact"}}, 23, "path_/api/exact", "path_/api/exact"},
		{[]entry{{"path", "/other"}}, 0, "", ""},
		{[]entry{{"sku", "az"}}, 24, "sku_az", "sku_a*z"},
		{[]entry{{"sku", "a-long-z"}}, 24, "sku_a-long-z", "sku_a*z"},
		{[]entry{{"sku", "a-long-y"}}, 0, "", ""},
		{[]entry{{"route", "v1/items/42/x"}}, 25, "route_v1/items/42/x", "route_v*/items/*/x"},
		{[]entry{{"route", "v1/items/42/y"}}, 0, "", ""},
		{[]entry{{"tenant", "t-1"}, {"op", "get"}}, 26, "tenant_t-*.op_get", "tenant_t-*.op"}, // shared by every t-
		{[]entry{{"tenant", "t-2"}, {"op", "get"}}, 26, "tenant_t-*.op_get", "tenant_t-*.op"},
		{[]entry{{"tenant", "t-2"}}, 0, "", ""},
		{[]entry{{"file", "f1"}, {"op", "get"}}, 27, "file_f1.op_get", "file_f*.op"}, // each f value its own counter
		{[]entry{{"user", "bob"}, {"op", "read-all"}}, 28, "user_bob.op_read-all", "user_bob.op_read-all"},
		{[]entry{{"user", "bob"}, {"op", "write-x"}}, 29, "user_bob.op_write-x", "user_bob.op_write*"},
	} {
		m := tr.match("w", c.entries)
		got := int64(0)
		if m.pol != nil {
			got = m.pol.Limits[0].Limit
		}
		if got != c.limit {
			t.Errorf("%v: limit %d, want %d", c.entries, got, c.limit)
			continue
		}
		if got == 0 {
			continue
		}
		if b := bucket(c.entries, m.shared); b != c.bucket || m.metricKey != c.metric {
			t.Errorf("%v: bucket %q metric %q; want %q, %q", c.entries, b, m.metricKey, c.bucket, c.metric)
		}
	}
}

func TestWildcardMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, s string
		want       bool
	}{
		{"k_foo*", "k_foo", true}, {"k_foo*", "k_foobar", true}, {"k_foo*", "k_fo", false},
		{"k_a*b*c", "k_abc", true}, {"k_a*b*c", "k_a-b-c", true}, {"k_a*b*c", "k_acb", false},
		{"k_a*a", "k_a", false}, {"k_*", "k_", true}, {"k_x", "k_x", true}, {"k_x", "k_y", false},
		{"k_*mid*", "k_amidb", true}, {"k_*mid*", "k_mi", false},
	} {
		if got := wildcardMatch(strings.Split(c.pattern, "*"), c.s); got != c.want {
			t.Errorf("%q ~ %q = %v", c.pattern, c.s, got)
		}
	}
}

func TestLimitStats(t *testing.T) {
	for _, c := range []struct {
		limit, used, cost int64
		allowed, shadow   bool
		want              metrics.RLSLimitStats
	}{
		{10, 0, 1, true, false, metrics.RLSLimitStats{TotalHits: 1, WithinLimit: 1}},
		{10, 7, 2, true, false, metrics.RLSLimitStats{TotalHits: 2, WithinLimit: 2, NearLimit: 1}}, // 9 is past 8
		{10, 9, 1, true, false, metrics.RLSLimitStats{TotalHits: 1, WithinLimit: 1, NearLimit: 1}},
		{10, 9, 3, false, false, metrics.RLSLimitStats{TotalHits: 3, OverLimit: 2, NearLimit: 1}},
		{10, 10, 2, false, true, metrics.RLSLimitStats{TotalHits: 2, OverLimit: 2, ShadowMode: 2}},
	} {
		if got := limitStats(c.limit, c.used, c.cost, c.allowed, c.shadow); got != c.want {
			t.Errorf("%+v: %+v", c, got)
		}
	}
}

// BenchmarkTreeMatch: one descriptor matched and named for metrics, the
// per-request work the configuration features add before the log entry.
func BenchmarkTreeMatch(b *testing.B) {
	tr := buildTree(envoyPolicies(b, wildConfig))
	for _, c := range []struct {
		name    string
		entries []entry
	}{
		{"key alone", []entry{{"client", "anyone"}}},
		{"wildcard shared, nested", []entry{{"tenant", "t-1"}, {"op", "get"}}},
		{"middle wildcards", []entry{{"route", "v1/items/42/x"}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				m := tr.match("w", c.entries)
				_ = bucket(c.entries, m.shared)
			}
		})
	}
}
