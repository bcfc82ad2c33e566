// Package golden compares a test's answers with a golden file, for the
// front ends' golden tests (httpapi, rls): one rule for rewriting the
// file and for naming the first line that differs.
package golden

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Check fails t unless got equals the golden file's text; with update it
// first writes got to the file (making its directory).
func Check(t testing.TB, file, got string, update bool) {
	t.Helper()
	if update {
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if got == string(want) {
		return
	}
	gotLines, wantLines := strings.Split(got, "\n"), strings.Split(string(want), "\n")
	for i := range min(len(gotLines), len(wantLines)) {
		if gotLines[i] != wantLines[i] {
			t.Fatalf("answers differ from %s at line %d:\n got  %s\n want %s", file, i+1, gotLines[i], wantLines[i])
		}
	}
	t.Fatalf("answers differ from %s in length: %d lines, want %d", file, len(gotLines), len(wantLines))
}
