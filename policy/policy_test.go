package policy

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestValidateNamesTheField(t *testing.T) {
	ok := Policy{Name: "api", Algorithm: "token_bucket", Limits: []Limit{{Limit: 10, Window: Duration(time.Second), Burst: 20}, {Limit: 1000, Window: Duration(24 * time.Hour)}}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid policy: %v", err)
	}
	nine := make([]Limit, 9)
	for i := range nine {
		nine[i] = Limit{Limit: 1, Window: Duration(time.Duration(i+1) * time.Second)}
	}
	for _, tc := range []struct {
		name string
		p    Policy
		want string
	}{
		{"empty name", Policy{Algorithm: "fixed_window", Limits: ok.Limits[1:]}, "name"},
		{"bad name", Policy{Name: "a/b", Algorithm: "fixed_window", Limits: ok.Limits[1:]}, "name"},
		{"long name", Policy{Name: strings.Repeat("x", 65), Algorithm: "fixed_window", Limits: ok.Limits[1:]}, "name"},
		{"unknown algorithm", Policy{Name: "p", Algorithm: "leaky_bucket", Limits: ok.Limits[1:]}, "algorithm"},
		{"no limits", Policy{Name: "p", Algorithm: "fixed_window"}, "limits:"},
		{"nine limits", Policy{Name: "p", Algorithm: "fixed_window", Limits: nine}, "limits:"},
		{"limit 0", Policy{Name: "p", Algorithm: "fixed_window", Limits: []Limit{{Limit: 0, Window: Duration(time.Second)}}}, "limits[0].limit"},
		{"limit too big", Policy{Name: "p", Algorithm: "fixed_window", Limits: []Limit{{Limit: MaxLimit + 1, Window: Duration(time.Second)}}}, "limits[0].limit"},
		{"window 0", Policy{Name: "p", Algorithm: "fixed_window", Limits: []Limit{{Limit: 1}}}, "limits[0].window"},
		{"window negative", Policy{Name: "p", Algorithm: "fixed_window", Limits: []Limit{{Limit: 1, Window: Duration(-time.Second)}}}, "limits[0].window"},
		{"window over 366 days", Policy{Name: "p", Algorithm: "fixed_window", Limits: []Limit{{Limit: 1, Window: Duration(367 * 24 * time.Hour)}}}, "limits[0].window"},
		{"window below 1ms", Policy{Name: "p", Algorithm: "fixed_window", Limits: []Limit{{Limit: 1, Window: Duration(time.Microsecond)}}}, "limits[0].window"},
		{"same window twice", Policy{Name: "p", Algorithm: "fixed_window", Limits: []Limit{{Limit: 1, Window: Duration(time.Second)}, {Limit: 2, Window: Duration(time.Second)}}}, "limits[1].window"},
		{"burst negative", Policy{Name: "p", Algorithm: "token_bucket", Limits: []Limit{{Limit: 1, Window: Duration(time.Second), Burst: -1}}}, "limits[0].burst"},
		{"burst on a window", Policy{Name: "p", Algorithm: "sliding_window", Limits: []Limit{{Limit: 1, Window: Duration(time.Second), Burst: 5}}}, "limits[0].burst"},
	} {
		err := tc.p.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error naming %q", tc.name, err, tc.want)
		}
	}
}

const example = `
policies:
  - name: login
    algorithm: fixed_window
    limits:
      - {limit: 5, window: 1m}
  - name: search
    algorithm: sliding_window
    limits:
      - {limit: 100, window: 1s}
      - {limit: 10000, window: 24h}
  - name: upload
    algorithm: token_bucket
    limits:
      - {limit: 10, window: 1s, burst: 50}
`

func TestParseYAMLAndJSON(t *testing.T) {
	ps, err := Parse([]byte(example))
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 3 || ps[1].Limits[1].Window != Duration(24*time.Hour) || ps[2].Limits[0].Burst != 50 {
		t.Fatalf("parsed %+v", ps)
	}
	js := `[{"name":"login","algorithm":"fixed_window","limits":[{"limit":5,"window":"1m"}]}]`
	ps2, err := Parse([]byte(js))
	if err != nil || len(ps2) != 1 || !ps2[0].Equal(ps[0]) {
		t.Fatalf("JSON list: %+v %v", ps2, err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "p.yaml")
	os.WriteFile(path, []byte(example), 0o644)
	if ps3, err := ReadFile(path); err != nil || len(ps3) != 3 {
		t.Fatalf("ReadFile: %v", err)
	}
	one, err := ParseOne("login", []byte(`{"algorithm":"fixed_window","limits":[{"limit":5,"window":"1m"}]}`))
	if err != nil || !one.Equal(ps[0]) {
		t.Fatalf("ParseOne: %+v %v", one, err)
	}
}

func TestParseNamesThePathOfBadInput(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"policies:\n  - name: a\n    algorithm: fixed_window\n    limits: [{limit: 1, window: 1s, wndow: 2s}]\n", "policies[0].limits[0].wndow: unknown field"},
		{"- name: a\n  colour: red\n", "[0].colour: unknown field"},
		{"- name: a\n  algorithm: fixed_window\n  limits: [{limit: 1.5, window: 1s}]\n", "[0].limits[0].limit"},
		{"- name: a\n  algorithm: fixed_window\n  limits: [{limit: 1, window: soon}]\n", "[0].limits[0].window"},
		{"- name: a\n  algorithm: fixed_window\n  limits: [{limit: 1, window: 1s, burst: 0}]\n", "[0].limits[0].burst"},
		{"- name: a\n  algorithm: fixed_window\n  limits: [{limit: 0, window: 1s}]\n", "limits[0].limit"},
		{"- {name: a, algorithm: fixed_window, limits: [{limit: 1, window: 1s}]}\n- {name: a, algorithm: fixed_window, limits: [{limit: 1, window: 1s}]}\n", "[1]: policy \"a\" is also [0]"},
		{"polices: []\n", "unknown field \"polices\""},
		{"- [1, 2\n", "not YAML or JSON"},
	} {
		_, err := Parse([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want an error containing %q", tc.in, err, tc.want)
		}
	}
	if _, err := ParseOne("a", []byte(`{"name":"b","algorithm":"fixed_window","limits":[{"limit":1,"window":"1s"}]}`)); err == nil || !strings.Contains(err.Error(), "name") {
		t.Errorf("a body naming another policy: %v", err)
	}
}

func TestDiff(t *testing.T) {
	ps, _ := Parse([]byte(example))
	cur := []Policy{ps[0], Fixed("old", 1, time.Second), {Name: "search", Algorithm: "sliding_window", Limits: ps[1].Limits[:1]}}
	added, changed, removed := Diff(cur, ps)
	if len(added) != 1 || added[0].Name != "upload" || len(changed) != 1 || changed[0].Name != "search" || len(removed) != 1 || removed[0] != "old" {
		t.Fatalf("diff: added %v changed %v removed %v", added, changed, removed)
	}
}

// FuzzParse: any bytes parse to policies that validate, or to an error.
func FuzzParse(f *testing.F) {
	f.Add([]byte(example))
	f.Add([]byte(`[{"name":"x","algorithm":"token_bucket","limits":[{"limit":1,"window":"1h","burst":3}]}]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ps, err := Parse(b)
		if err != nil {
			return
		}
		for _, p := range ps {
			if p.Validate() != nil {
				t.Fatalf("parsed an invalid policy %+v", p)
			}
		}
	})
}

// examples/policies.yaml is a valid policy file, and docs/policies.md
// shows it as it is.
func TestExamplePoliciesParse(t *testing.T) {
	file, err := os.ReadFile(filepath.Join("..", "examples", "policies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := Parse(file)
	if err != nil || len(ps) < 5 {
		t.Fatalf("examples/policies.yaml: %d policies, %v", len(ps), err)
	}
	algs := map[string]bool{}
	for _, p := range ps {
		algs[p.Algorithm] = true
	}
	if len(algs) != 3 {
		t.Errorf("examples/policies.yaml shows %d of the 3 algorithms", len(algs))
	}
	doc, err := os.ReadFile(filepath.Join("..", "docs", "policies.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```yaml\n")
	block, _, _ := strings.Cut(rest, "```")
	if !ok || block != string(file) {
		t.Fatalf("docs/policies.md's first yaml block is not examples/policies.yaml:\n%s", block)
	}
}

// Windows print the way people write them, and read back unchanged.
func TestDurationString(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Minute: "1m", 24 * time.Hour: "24h", 90 * time.Minute: "1h30m",
		time.Hour + time.Second: "1h0m1s", 1500 * time.Millisecond: "1.5s", time.Second: "1s",
	} {
		got := Duration(d).String()
		if got != want {
			t.Errorf("Duration(%v) = %q, want %q", d, got, want)
		}
		var back Duration
		if err := back.UnmarshalText([]byte(got)); err != nil || time.Duration(back) != d {
			t.Errorf("%q reads back as %v, %v", got, time.Duration(back), err)
		}
	}
}

// YAML aliases let a few hundred bytes stand for gigabytes: nine lists of
// nine references each, eight deep, is 9^8 strings. The document is
// refused by the cap on expanded values, named in a short error; below the
// cap, errors name the kind of a bad value instead of formatting it.
func TestAliasBombGetsAShortError(t *testing.T) {
	var b strings.Builder
	b.WriteString("algorithm: fixed_window\nlimits:\n  - {window: 1s, limit: [&a0 [")
	b.WriteString(strings.TrimSuffix(strings.Repeat(`"xxxxxxxx",`, 9), ","))
	b.WriteString("]")
	for i := 1; i < 8; i++ {
		fmt.Fprintf(&b, ", &a%d [%s]", i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d,", i-1), 9), ","))
	}
	b.WriteString("]}\n")
	_, err := ParseOne("bomb", []byte(b.String()))
	if err == nil || len(err.Error()) > 200 || !strings.Contains(err.Error(), fmt.Sprintf("more than %d values once its YAML aliases are expanded", MaxValues)) {
		t.Fatalf("alias bomb (%d bytes): %.300v (%d bytes of error)", b.Len(), err, len(fmt.Sprint(err)))
	}
	_, err = ParseOne("small", []byte("algorithm: fixed_window\nlimits:\n  - {window: 1s, limit: &a [1, 2]}\n  - {window: 2s, limit: *a}\n"))
	if err == nil || len(err.Error()) > 200 || !strings.Contains(err.Error(), "limits[0].limit: want a whole number, got a list") {
		t.Fatalf("alias within the cap: %.300v", err)
	}
	// A complex key made of the same aliases is named by its kind too.
	_, err = Parse([]byte("? &a [x, y]\n: 1\n"))
	if err == nil || len(err.Error()) > 200 {
		t.Fatalf("complex key: %.300v", err)
	}
}

// A file is one document: a second one after --- would be silently
// ignored, so it is an error; an empty file defines nothing.
func TestParseOneDocumentOnly(t *testing.T) {
	one := "- {name: a, algorithm: fixed_window, limits: [{limit: 1, window: 1s}]}\n"
	if ps, err := Parse([]byte("---\n" + one)); err != nil || len(ps) != 1 {
		t.Fatalf("one document after a leading ---: %v %v", ps, err)
	}
	if _, err := Parse([]byte(one + "---\n" + strings.ReplaceAll(one, "name: a", "name: b"))); err == nil || !strings.Contains(err.Error(), "more than one YAML document") {
		t.Fatalf("two documents: %v", err)
	}
	for _, empty := range []string{"", "\n", "# nothing here\n"} {
		if ps, err := Parse([]byte(empty)); err != nil || len(ps) != 0 {
			t.Fatalf("%q: %v %v", empty, ps, err)
		}
	}
}

func TestPolicyOptionsParseAndValidate(t *testing.T) {
	ps, err := Parse([]byte("policies:\n- name: a\n  algorithm: fixed_window\n  consistency: leased\n  align: epoch\n  limits: [{limit: 5, window: 1m}]\n- name: b\n  algorithm: token_bucket\n  consistency: strict\n  limits: [{limit: 5, window: 1s}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !ps[0].IsLeased() || !ps[0].EpochAligned() || ps[1].IsLeased() || ps[1].Consistency != "" {
		t.Fatalf("options: %+v", ps)
	}
	for _, body := range []string{
		`{"algorithm":"fixed_window","consistency":"eventual","limits":[{"limit":1,"window":"1s"}]}`,
		`{"algorithm":"token_bucket","align":"epoch","limits":[{"limit":1,"window":"1s"}]}`,
		`{"algorithm":"fixed_window","align":"minute","limits":[{"limit":1,"window":"1s"}]}`,
	} {
		if _, err := ParseOne("x", []byte(body)); err == nil {
			t.Errorf("%s: accepted", body)
		}
	}
}

func TestConcurrencyPolicyParsesAndValidates(t *testing.T) {
	for _, body := range []string{
		`{"algorithm":"concurrency","limits":[{"limit":3}]}`,
		"algorithm: concurrency\nlimits: [{limit: 3}]\n",
	} {
		p, err := ParseOne("jobs", []byte(body))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if !p.IsConcurrency() || p.Limits[0].Limit != 3 || p.String() != "jobs concurrency 3 concurrent" {
			t.Fatalf("%s: %+v %s", body, p, p)
		}
	}
	for body, field := range map[string]string{
		`{"algorithm":"concurrency","limits":[{"limit":3,"window":"1s"}]}`:          "limits[0].window",
		`{"algorithm":"concurrency","limits":[{"limit":0}]}`:                        "limits[0].limit",
		`{"algorithm":"concurrency","limits":[{"limit":1},{"limit":2}]}`:            "limits:",
		`{"algorithm":"concurrency","consistency":"leased","limits":[{"limit":1}]}`: "consistency",
		`{"algorithm":"concurrency","limits":[{"limit":1,"burst":2}]}`:              "burst",
		`{"algorithm":"concurrency","align":"epoch","limits":[{"limit":1}]}`:        "align",
		`{"algorithm":"concurrency","limits":[{"limit":1000000}]}`:                  "limits[0].limit",
	} {
		_, err := ParseOne("jobs", []byte(body))
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: error %v, want one naming %s", body, err, field)
		}
	}
}
