package policy

import (
	"fmt"
	"strings"
	"testing"
)

// A descriptor's metadata is free-form YAML that the loader keeps (and
// encodes as JSON), so it is where a hostile envoyproxy/ratelimit file puts
// its aliases or its nesting: both are refused by the document's bounds
// before anything is built (on main before the bounds, a 1 KB file of
// aliases here took import-envoy past 2 GB).
func TestEnvoyMetadataBombsAreRefused(t *testing.T) {
	var aliases strings.Builder
	aliases.WriteString("domain: bomb\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    metadata:\n")
	aliases.WriteString(`      a0: &a0 ["xxxxxxxxxx","x","x","x","x","x","x","x","x","x"]` + "\n")
	for i := 1; i < 10; i++ {
		fmt.Fprintf(&aliases, "      a%d: &a%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d,", i-1), 10), ","))
	}
	deep := "domain: deep\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    metadata: {a: " +
		strings.Repeat("[", 50_000) + strings.Repeat("]", 50_000) + "}\n"
	for name, c := range map[string]struct{ doc, want string }{
		"aliases": {aliases.String(), fmt.Sprintf("more than %d values once its YAML aliases are expanded", MaxValues)},
		"nesting": {deep, fmt.Sprintf("nested deeper than %d levels", MaxDepth)},
	} {
		_, _, err := ParseEnvoy([]byte(c.doc))
		if err == nil || !strings.Contains(err.Error(), c.want) || len(err.Error()) > 300 {
			t.Errorf("%s in metadata (%d bytes): %.300v; want a short error saying %q", name, len(c.doc), err, c.want)
		}
	}
}
