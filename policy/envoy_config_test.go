package policy

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
)

// One configuration per rule of envoyproxy/ratelimit's loader (our own
// files, in the spirit of its test/config): those it accepts load, those
// it refuses are refused with its message and the YAML path.
func TestLoadEnvoyAcceptsAndRefusesAsEnvoyproxyRatelimit(t *testing.T) {
	for _, c := range []struct {
		name  string
		files []string
		merge bool
		want  string // "" accepts; else the error must contain it
	}{
		{"basic nesting, defaults and a whitelisted value", []string{`
domain: shop
descriptors:
  - key: user
    value: alice
    descriptors:
      - key: action
        rate_limit: {unit: second, requests_per_unit: 3}
      - key: action
        value: buy
        rate_limit: {unit: second, requests_per_unit: 6}
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 12}
  - key: client
    value: partner
  - key: region
    rate_limit: {name: region_limit, unit: day, requests_per_unit: 1}
`}, false, ""},
		{"wildcards trailing, middle and several", []string{`
domain: shop
descriptors:
  - {key: path, value: "/api/*", rate_limit: {unit: minute, requests_per_unit: 5}}
  - {key: sku, value: "a*z", rate_limit: {unit: minute, requests_per_unit: 5}}
  - {key: route, value: "v*/items/*/x", rate_limit: {unit: hour, requests_per_unit: 5}}
  - key: tenant
    value: "t-*"
    share_threshold: true
    value_to_metric: true
    descriptors:
      - {key: op, detailed_metric: true, rate_limit: {unit: week, requests_per_unit: 9}}
`}, false, ""},
		{"metadata, shadow, quota, replaces and the long units", []string{`
domain: shop
descriptors:
  - key: a
    shadow_mode: true
    quota_mode: true
    metadata: {owner: team-a, tiers: [1, 2], nested: {deep: true}}
    rate_limit: {name: a, replaces: [{name: b}], unit: month, requests_per_unit: 100}
  - {key: b, rate_limit: {name: b, unit: year, requests_per_unit: 1000}}
  - {key: c, rate_limit: {unlimited: true}}
  - {key: d, unit: misplaced-but-known, rate_limit: {unit: MINUTE, requests_per_unit: 1}}
`}, false, ""},
		{"an empty descriptor list", []string{"domain: shop\ndescriptors:\n"}, false, ""},
		{"two files of one domain merged", []string{
			"domain: shop\ndescriptors:\n  - {key: a, value: x, rate_limit: {unit: minute, requests_per_unit: 1}}\n",
			"domain: shop\ndescriptors:\n  - {key: a, value: y, rate_limit: {unit: minute, requests_per_unit: 2}}\n"}, true, ""},

		{"not YAML", []string{"'''\n"}, false, "error loading config file"},
		{"no domain", []string{"descriptors:\n"}, false, "config file cannot have empty domain"},
		{"a domain twice without merge", []string{"domain: shop\n", "domain: shop\n"}, false, "file1: domain: duplicate domain 'shop'"},
		{"a key twice across merged files", []string{
			"domain: shop\ndescriptors:\n  - {key: a, value: x}\n",
			"domain: shop\ndescriptors:\n  - {key: a, value: x}\n"}, true, "descriptors[0] (shop.a_x): duplicate descriptor composite key 'shop.a_x'"},
		{"an empty key", []string{"domain: shop\ndescriptors:\n  - value: x\n"}, false, "descriptors[0].key: descriptor has empty key"},
		{"a key twice", []string{"domain: shop\ndescriptors:\n  - key: k\n    descriptors:\n      - {key: a, value: x}\n      - {key: a, value: x}\n"}, false,
			"descriptors[0].descriptors[1] (shop.k.a_x): duplicate descriptor composite key"},
		{"a bad unit", []string{"domain: shop\ndescriptors:\n  - {key: a, rate_limit: {unit: fortnight, requests_per_unit: 1}}\n"}, false,
			"descriptors[0].rate_limit (shop.a): unit: invalid rate limit unit 'fortnight'"},
		{"unlimited with a unit", []string{"domain: shop\ndescriptors:\n  - {key: a, rate_limit: {unlimited: true, unit: day, requests_per_unit: 3}}\n"}, false,
			"should not specify rate limit unit when unlimited"},
		{"replaces itself", []string{"domain: shop\ndescriptors:\n  - {key: a, rate_limit: {name: me, replaces: [{name: me}], unit: second, requests_per_unit: 1}}\n"}, false,
			"descriptors[0].rate_limit (shop.a): replaces[0]: replaces should not contain name of same descriptor"},
		{"an empty replaces entry", []string{"domain: shop\ndescriptors:\n  - {key: a, rate_limit: {name: me, replaces: [{name: }], unit: second, requests_per_unit: 1}}\n"}, false,
			"should not have an empty replaces entry"},
		{"a misspelt key", []string{"domain: shop\ndescriptors:\n  - key: a\n    ratelimit: {unit: day, requests_per_unit: 1}\n"}, false,
			"descriptors[0].ratelimit: config error, unknown key 'ratelimit'"},
		{"a misspelt nested key", []string{"domain: shop\ndescriptors:\n  - key: a\n    rate_limit: {unit: day, requestsperunit: 1}\n"}, false,
			"descriptors[0].rate_limit.requestsperunit: config error, unknown key 'requestsperunit'"},
		{"a key that is not a string", []string{"1.5: shop\n"}, false, "config error, key is not of type string: 1.5"},
		{"a list of strings", []string{"domain: shop\ndescriptors:\n  - a\n  - b\n"}, false,
			"descriptors[0]: config error, yaml file contains list of type other than map: a"},
		{"share_threshold without a wildcard", []string{"domain: shop\ndescriptors:\n  - {key: a, value: x, share_threshold: true}\n"}, false,
			"share_threshold can only be used with wildcard values (containing '*'), but found key 'a_x'"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var files []EnvoyFile
			for i, f := range c.files {
				files = append(files, EnvoyFile{Name: "file" + string(rune('0'+i)), Data: []byte(f)})
			}
			_, ps, err := LoadEnvoy(files, EnvoyOptions{MergeDomains: c.merge})
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && err == nil:
				t.Fatalf("accepted (%d policies); want an error with %q", len(ps), c.want)
			case c.want != "" && !strings.Contains(err.Error(), c.want):
				t.Fatalf("error %q; want it to contain %q", err, c.want)
			case c.want != "" && ps != nil:
				t.Fatalf("refused but returned %d policies", len(ps))
			}
			for _, p := range ps {
				if err := p.Validate(); err != nil || p.Align != AlignEpoch {
					t.Fatalf("%s: %v, align %q", p.Name, err, p.Align)
				}
			}
		})
	}
}

// TestLoadEnvoyRules checks what one configuration becomes: flags on the
// path, whitelisting leaves, merged order, anchored on request.
func TestLoadEnvoyRules(t *testing.T) {
	files := []EnvoyFile{{Name: "a.yaml", Data: []byte(`
domain: shop
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 12}
  - key: client
    value: partner
  - key: tenant
    value: "t-*"
    share_threshold: true
    descriptors:
      - key: op
        metadata: {owner: a}
        rate_limit: {name: ops, replaces: [{name: other}], unit: hour, requests_per_unit: 9}
`)}, {Name: "b.yaml", Data: []byte("domain: shop\ndescriptors:\n  - {key: late, value: \"x*\", rate_limit: {unit: second, requests_per_unit: 1}}\n")}}
	domains, ps, err := LoadEnvoy(files, EnvoyOptions{MergeDomains: true, Anchored: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(domains) != 1 || len(ps) != 4 {
		t.Fatalf("domains %v, %d policies", domains, len(ps))
	}
	by := map[string]Policy{}
	for _, p := range ps {
		by[envoyFullKey(p.Envoy.Domain, p.Envoy.Descriptors)] = p
		if p.Align != "" {
			t.Errorf("%s aligned %q; asked anchored", p.Name, p.Align)
		}
	}
	if e := by["shop.client_partner"].Envoy; e == nil || !e.NoLimit {
		t.Errorf("the whitelisting leaf: %+v", e)
	}
	ops := by["shop.tenant_t-*.op"].Envoy
	if ops == nil || !ops.Descriptors[0].ShareThreshold || ops.Descriptors[0].Order != 2 || ops.Descriptors[1].Order != 3 ||
		ops.Name != "ops" || len(ops.Replaces) != 1 || ops.Metadata["owner"] != "a" || ops.Unit != "HOUR" {
		t.Errorf("ops: %+v", ops)
	}
	if e := by["shop.late_x*"].Envoy; e == nil || e.Descriptors[0].Order != 4 {
		t.Errorf("the merged file's descriptor: %+v", e)
	}
}

// An imported policy round-trips through a policy file (export, apply):
// every match field, metadata included, survives YAML and JSON.
func TestEnvoyPolicyRoundTripsThroughFiles(t *testing.T) {
	_, ps, err := LoadEnvoy([]EnvoyFile{{Name: "a.yaml", Data: []byte(`
domain: shop
descriptors:
  - key: tenant
    value: "t-*"
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: op
        quota_mode: true
        metadata: {owner: a, tiers: [1, 2], nested: {deep: true}}
        rate_limit: {name: ops, replaces: [{name: other}], unit: hour, requests_per_unit: 9}
`)}}, EnvoyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := ps[0]
	for _, doc := range []string{
		"algorithm: fixed_window\nalign: epoch\nlimits: [{limit: 9, window: 1h}]\nenvoy:\n" + indent(mustYAML(t, p.Envoy)),
		string(mustJSON(t, p)),
	} {
		got, err := ParseOne(p.Name, []byte(doc))
		if err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		if !got.Equal(p) {
			t.Fatalf("round trip lost something:\n got %+v\nwant %+v", got.Envoy, p.Envoy)
		}
	}
}

func mustYAML(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ") + "\n"
}
