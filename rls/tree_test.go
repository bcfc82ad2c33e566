package rls

import (
	"testing"

	"github.com/rlnode/rlnode/policy"
)

func TestTreeMatch(t *testing.T) {
	_, rules, err := policy.ParseEnvoy([]byte(`
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
`))
	if err != nil {
		t.Fatal(err)
	}
	var ps []policy.Policy
	for _, r := range rules {
		ps = append(ps, r.Policy(false))
	}
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
		p := tr.match(c.domain, c.entries)
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
	if got := bucket([]entry{{"a", "1"}, {"b", "x"}}); got != "a_1.b_x" {
		t.Errorf("bucket %q", got)
	}
	long := make([]byte, 300)
	for i := range long {
		long[i] = 'v'
	}
	if got := bucket([]entry{{"k", string(long)}}); len(got) != len("sha256:")+64 {
		t.Errorf("long bucket %q", got)
	}
	if got := bucket([]entry{{"k", "tab\there"}}); got[:7] != "sha256:" {
		t.Errorf("control characters kept: %q", got)
	}
}
