package policy

import (
	"fmt"
	"strings"
	"testing"
)

// Nesting past MaxDepth is refused, in JSON and in each YAML style,
// before the YAML parser (whose memory grows with the square of the depth)
// sees it; nesting within it still parses.
func TestDeepDocumentsAreRefusedBeforeParsing(t *testing.T) {
	const deep = 20_000
	for name, doc := range map[string]string{
		"json object":   strings.Repeat(`{"a":`, deep) + "1" + strings.Repeat("}", deep),
		"json list":     `{"limits":` + strings.Repeat("[", deep) + strings.Repeat("]", deep) + "}",
		"yaml flow":     "limits: " + strings.Repeat("[", deep) + strings.Repeat("]", deep),
		"yaml entries":  "limits: " + strings.Repeat("- ", deep) + "1\n",
		"yaml mappings": "limits:\n" + deepBlockMapping(MaxDepth+1),
	} {
		_, err := ParseOne("deep", []byte(doc))
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("nested deeper than %d levels", MaxDepth)) {
			t.Errorf("%s: %.200v", name, err)
		}
		if _, err := Parse([]byte(doc)); err == nil {
			t.Errorf("%s as a file: accepted", name)
		}
	}
	ok := "algorithm: fixed_window\nlimits:\n- limit: 5\n  window: 1s\n"
	if _, err := ParseOne("ok", []byte(ok)); err != nil {
		t.Fatal(err)
	}
}

func deepBlockMapping(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%sk%d:\n", strings.Repeat(" ", i+1), i)
	}
	return b.String()
}

// A JSON body names each field once: which of two would count is not left
// to the decoder.
func TestJSONBodyRefusesDuplicateKeys(t *testing.T) {
	_, err := ParseOne("d", []byte(`{"algorithm":"fixed_window","limits":[{"limit":1,"window":"1s","limit":1000}]}`))
	if err == nil || !strings.Contains(err.Error(), "limits[0].limit: given twice") {
		t.Fatalf("duplicate key: %v", err)
	}
	p, err := ParseOne("d", []byte(`{"algorithm":"fixed_window","limits":[{"limit":7,"window":"1s"}]}`))
	if err != nil || p.Limits[0].Limit != 7 {
		t.Fatalf("plain JSON: %+v %v", p, err)
	}
}

// A file may not define more policies than the table holds.
func TestFileOverPolicyCap(t *testing.T) {
	var b strings.Builder
	for i := range MaxPolicies + 1 {
		fmt.Fprintf(&b, "- {name: p%d, algorithm: fixed_window, limits: [{limit: 1, window: 1s}]}\n", i)
	}
	_, err := Parse([]byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("at most %d", MaxPolicies)) {
		t.Fatalf("%d policies: %.200v", MaxPolicies+1, err)
	}
}
