package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// TestPolicySetKeepsWhatItWasNotGiven: `policy set` replaces a policy
// whole (a PUT), but a flag left out must not silently reset a field: a
// leased sliding-window policy whose limit is changed stays leased and
// sliding, and the command says what it kept; a change the kept fields
// make impossible is refused naming them.
func TestPolicySetKeepsWhatItWasNotGiven(t *testing.T) {
	n := proctest.StartNode(t, rlnodeBin, "n1")
	proctest.WaitReady(t, n, 20*time.Second)
	run := func(args ...string) (string, string, int) {
		return proctest.Run(t, rlnodeBin, []string{envAddr + "=" + n.URL()}, args...)
	}
	proctest.Poll(t, 20*time.Second, func() error {
		if out, errs, code := run("policy", "set", "api", "--algorithm", "sliding_window", "--consistency", "leased", "--limit", "100", "--window", "1s"); code != 0 {
			return fmt.Errorf("policy set: exit %d\n%s%s", code, out, errs)
		}
		return nil
	})
	out, errs, code := run("policy", "set", "api", "--limit", "200", "--window", "1s")
	if code != 0 || !strings.Contains(out, "kept from the current policy: --algorithm sliding_window, --consistency leased") {
		t.Fatalf("policy set of the limit only: exit %d\n%s%s; want it to say it kept the algorithm and consistency", code, out, errs)
	}
	if got, _, _ := run("policy", "get", "api"); squash(got) != "api sliding_window leased 200/1s" {
		t.Fatalf("policy get after changing the limit only: %q; want api sliding_window leased 200/1s", got)
	}
	out, errs, code = run("policy", "set", "api", "--consistency", "strict")
	if code != 0 || !strings.Contains(out, "--limit/--window 200/1s") {
		t.Fatalf("policy set of the consistency only: exit %d\n%s%s", code, out, errs)
	}
	if got, _, _ := run("policy", "get", "api"); squash(got) != "api sliding_window strict 200/1s" {
		t.Fatalf("policy get after --consistency strict: %q", got)
	}
	// A token bucket's burst is kept with its limits.
	run("policy", "set", "tb", "--algorithm", "token_bucket", "--limit", "10", "--window", "1s", "--burst", "20")
	if out, errs, code = run("policy", "set", "tb", "--mode", "shadow"); code != 0 {
		t.Fatalf("policy set tb --mode shadow: exit %d\n%s%s", code, out, errs)
	}
	if got, _, _ := run("policy", "get", "tb"); !strings.Contains(got, "10/1s burst 20") || !strings.Contains(got, "shadow") {
		t.Fatalf("policy get tb after --mode shadow: %q; want its burst 20 kept, in shadow", got)
	}
	run("policy", "set", "api", "--consistency", "leased")
	_, errs, code = run("policy", "set", "api", "--algorithm", "concurrency", "--limit", "4")
	if code == 0 || !strings.Contains(errs, "kept from the current policy: --consistency leased") {
		t.Fatalf("a concurrency algorithm on a leased policy: exit %d\n%s; want a refusal naming the kept --consistency leased", code, errs)
	}
}
