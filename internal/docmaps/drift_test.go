package docmaps

import (
	"strings"
	"testing"
)

// The checks must be able to fail: each edit below makes one map wrong in
// one way, and the check must say so, naming what is wrong.
func TestDriftIsCaught(t *testing.T) {
	tr := loadTree(t)
	dev := readPage(t, tr, developmentPage)
	clusterPage := readPage(t, tr, "cluster/DESIGN.md")
	policyPage := readPage(t, tr, "policy/DESIGN.md")
	cases := []struct {
		name, page, old, new, want string
		check                      func(page string) []string
	}{
		{"an arrow left out", dev, "`policy`, `window`, `lease` (bounds, body), `topkeys`", "`policy`, `window`, `lease` (bounds, body)",
			"does not name `topkeys` (imported by httpapi)", nil},
		{"an arrow that is not there", dev, "| `cluster` (types); prometheus |", "| `cluster` (types), `fsm`; prometheus |",
			"names `fsm`, which the room does not import", nil},
		{"stdlib that is not", dev, "| `internal/boundedfile` |", "| stdlib |",
			"does not name `internal/boundedfile` (imported by tlsconf)", nil},
		{"a typo", dev, "`window`, `internal/boundedfile`; goccy", "`windows`, `internal/boundedfile`; goccy",
			"names `windows`, which is no package or folder of the module", nil},
		{"a room left out", dev, "| `examples/` |", "| `exampels/` |",
			"package examples/ratelimited-api is in no row", nil},
		{"a file left out", clusterPage, "| `counter.go` |", "| counter |",
			"does not name counter.go", func(p string) []string { return checkDesignRooms(tr, "cluster", p) }},
		{"a file's imports cell wrong", policyPage, "naming the field | `window` |", "naming the field | stdlib |",
			"does not name `window` (imported by policy/policy.go)", func(p string) []string { return checkDesignRooms(tr, "policy", p) }},
		{"a file that is gone", clusterPage, "`counter.go`", "`counters.go`",
			"names counters.go, which is not a file of cluster/", func(p string) []string { return checkDesignRooms(tr, "cluster", p) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			check := c.check
			if check == nil {
				check = func(p string) []string { return checkDevelopmentRooms(tr, p) }
			}
			if got := check(c.page); len(got) != 0 {
				t.Fatalf("the map as committed already fails: %v", got)
			}
			if !strings.Contains(c.page, c.old) {
				t.Fatalf("the map no longer holds %q; update this test", c.old)
			}
			got := check(strings.Replace(c.page, c.old, c.new, 1))
			if !strings.Contains(strings.Join(got, "\n"), c.want) {
				t.Fatalf("after %q -> %q want a problem saying %q, got %q", c.old, c.new, c.want, got)
			}
		})
	}
}

// An imports column in a package's own rooms table is checked per row.
func TestDesignImportsColumnIsChecked(t *testing.T) {
	tr := loadTree(t)
	page := "| file | owns | imports |\n| --- | --- | --- |\n| `disk.go` | disk | `fsm` |\n"
	got := strings.Join(checkDesignRooms(tr, "cluster", page), "\n")
	for _, want := range []string{"does not name `cluster/storage` (imported by cluster/disk.go)", "names `fsm`, which the room does not import"} {
		if !strings.Contains(got, want) {
			t.Errorf("want %q in %q", want, got)
		}
	}
}
