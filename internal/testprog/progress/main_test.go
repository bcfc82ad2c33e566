package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// The printer says each package as it ends, a failed test's output, the
// missing-programs line, and the closing count CI reads.
func TestPrinter(t *testing.T) {
	var out bytes.Buffer
	p := &printer{out: &out, start: time.Now(), outputs: map[string][]string{}}
	for _, e := range []event{
		{Action: "start", Package: "x/a"},
		{Action: "output", Package: "x/a", Test: "TestOK", Output: "hidden\n"},
		{Action: "pass", Package: "x/a", Test: "TestOK"},
		{Action: "output", Package: "x/a", Test: "TestBad", Output: "    a_test.go:5: boom\n"},
		{Action: "fail", Package: "x/a", Test: "TestBad", Elapsed: 0.1},
		{Action: "output", Package: "x/a", Output: "SKIPPED 1 tests, programs missing: nginx (TestX: apt-get install nginx)\n"},
		{Action: "fail", Package: "x/a", Elapsed: 2},
		{Action: "pass", Package: "x/b", Elapsed: 1.5},
	} {
		b, _ := json.Marshal(e)
		var back event
		json.Unmarshal(b, &back)
		p.handle(back)
	}
	p.finish()
	got := out.String()
	for _, want := range []string{"boom", "x/a: SKIPPED 1 tests", "FAIL  x/a", "ok    x/b\t1.5s", "tests: 1 passed, 1 failed, 0 skipped"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "hidden") || !p.failed {
		t.Errorf("a passing test's output shown, or the failure not kept (failed=%v):\n%s", p.failed, got)
	}
}
