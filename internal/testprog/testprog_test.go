package testprog

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	// Records go to a directory of this test's own, not the user's.
	dir, err := os.MkdirTemp("", "testprog-")
	if err != nil {
		panic(err)
	}
	os.Setenv("TMPDIR", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// A missing program skips the test, and the skip is recorded where
// `go run ./internal/testprog/skipped` finds it.
func TestNeedSkipsAndRecords(t *testing.T) {
	t.Run("missing", func(t *testing.T) {
		Need(t, "rlnode-no-such-program", "apt-get install nothing")
		t.Fatal("Need returned for a program that does not exist")
	})
	if path := Need(t, "sh", "any shell"); path == "" {
		t.Fatal("Need found no sh")
	}
	got, err := ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Program != "rlnode-no-such-program" || got[0].Test != "TestNeedSkipsAndRecords/missing" {
		t.Fatalf("recorded %+v", got)
	}
	nginx := Skip{Test: "TestB", Program: "nginx", Install: "apt-get install nginx"}
	line := Summary(append(got, nginx, nginx)) // TestB skipped in two runs counts once
	for _, want := range []string{"SKIPPED 2 tests", "nginx (TestB: apt-get install nginx)", "rlnode-no-such-program (TestNeedSkipsAndRecords/missing: apt-get install nothing)"} {
		if !strings.Contains(line, want) {
			t.Errorf("summary %q lacks %q", line, want)
		}
	}
	if Summary(nil) != "" {
		t.Error("a summary with nothing skipped")
	}
	skips = nil // nothing for Report to print after this test
}

// The summary reaches stdout, which go test -json and -v pass on to a CI
// log, not only a terminal that a CI run does not have.
func TestReportWritesTheSummaryToStdout(t *testing.T) {
	mu.Lock()
	skips = []Skip{{Test: "TestB", Program: "nginx", Install: "apt-get install nginx"}}
	mu.Unlock()
	var stdout bytes.Buffer
	var terminal []string
	report(func(line string) bool { terminal = append(terminal, line); return true }, &stdout)
	mu.Lock()
	skips = nil
	mu.Unlock()
	if !strings.Contains(stdout.String(), "SKIPPED 1 tests, programs missing: nginx") {
		t.Fatalf("stdout got %q; want the SKIPPED summary", stdout.String())
	}
	if len(terminal) != 1 || terminal[0] != strings.TrimSpace(stdout.String()) {
		t.Fatalf("terminal got %q; want the same line once", terminal)
	}
}
