package policy

import (
	"strings"
	"testing"
)

// A PUT body in YAML that does not parse gets a one-line error naming the
// line and column (it becomes an HTTP problem's detail), not the source
// excerpt and caret the YAML library draws for a terminal, and not "not
// JSON" for a body that never claimed to be JSON.
func TestYAMLBodyErrorIsOneLine(t *testing.T) {
	for body, want := range map[string]string{
		"algorithm: fixed_window\nlimits: [\n":    "[2:9] sequence end token ']' not found",
		"algorithm: fixed_window\nalgorithm: x\n": `[2:1] mapping key "algorithm" already defined at [1:1]`,
	} {
		_, err := ParseOne("x", []byte(body))
		if err == nil || strings.ContainsAny(err.Error(), "|^\n") || !strings.Contains(err.Error(), want) ||
			!strings.HasPrefix(err.Error(), "body is neither a JSON object nor YAML: ") {
			t.Errorf("ParseOne(%q): %q; want one line with %q", body, err, want)
		}
	}
}
