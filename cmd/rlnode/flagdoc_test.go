package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateFlagDocs = flag.Bool("update-flag-docs", false, "rewrite docs/flags.md from rlnode serve --help")

// flagDocPath is the generated flag reference.
var flagDocPath = filepath.Join("..", "..", "docs", "flags.md")

func flagReference() string {
	var b bytes.Buffer
	fs, _ := serveFlags(&b)
	fs.Usage()
	return "# `rlnode serve` flags\n\n" +
		"<!-- Generated from `rlnode serve --help` by `go generate ./cmd/rlnode`; do not edit. -->\n\n" +
		"This is `rlnode serve --help`. What the settings mean together, the environment\n" +
		"variables and the config file are in [configuration.md](configuration.md).\n\n" +
		"```\n" + b.String() + "```\n"
}

// docs/flags.md is what `rlnode serve --help` prints: a flag added or
// changed without regenerating it fails here.
func TestFlagReference(t *testing.T) {
	want := flagReference()
	if *updateFlagDocs {
		if err := os.WriteFile(flagDocPath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	have, err := os.ReadFile(flagDocPath)
	if err != nil {
		t.Fatalf("%v: generate it with go generate ./cmd/rlnode", err)
	}
	if string(have) != want {
		hl, wl := strings.Split(string(have), "\n"), strings.Split(want, "\n")
		i := 0
		for i < len(hl) && i < len(wl) && hl[i] == wl[i] {
			i++
		}
		line := func(ls []string) string {
			if i < len(ls) {
				return ls[i]
			}
			return "(end of file)"
		}
		t.Fatalf("docs/flags.md differs from rlnode serve --help at line %d:\n  file: %s\n  help: %s\nregenerate it: go generate ./cmd/rlnode",
			i+1, line(hl), line(wl))
	}
}

// Every serve flag is in one of the help's groups, once.
func TestServeFlagsAreGrouped(t *testing.T) {
	fs, _ := serveFlags(&bytes.Buffer{})
	in := map[string]int{}
	for _, g := range serveFlagGroups {
		for _, name := range g.flags {
			in[name]++
			if fs.Lookup(name) == nil {
				t.Errorf("group %q names --%s, which serve does not have", g.title, name)
			}
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if in[f.Name] != 1 {
			t.Errorf("--%s is in %d groups of serveFlagGroups (servehelp.go); put it in one", f.Name, in[f.Name])
		}
	})
}
