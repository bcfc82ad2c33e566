package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
	"github.com/rlnode/rlnode/policy"
)

// peakRSSMB is a process's peak resident memory (VmHWM) in MB.
func peakRSSMB(t *testing.T, pid int) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			return kb >> 10
		}
	}
	t.Skip("no VmHWM in /proc status")
	return 0
}

// A deeply nested policy body, JSON or YAML, is refused with a 400 naming
// the depth before any parser builds it; the node's memory stays small and
// it keeps serving.
func TestNestedPolicyBodyIsRefusedAndNodeServes(t *testing.T) {
	n := proctest.StartNode(t, rlnodeBin, "deep")
	proctest.WaitReady(t, n, 15*time.Second)
	before := peakRSSMB(t, n.Pid())
	const deep = 20_000 // 100 KB of JSON: it grew a node to 3.9 GB through the YAML parser
	for name, body := range map[string]string{
		"json": strings.Repeat(`{"a":`, deep) + "1" + strings.Repeat("}", deep),
		"yaml": "limits: " + strings.Repeat("- ", deep) + "1\n",
	} {
		r, err := proctest.DoRaw("PUT", n.URL()+"/v1/policies/deep", "", []byte(body))
		if err != nil || r.Status != 400 || r.JSON["code"] != "invalid_request" ||
			!strings.Contains(fmt.Sprint(r.JSON["detail"]), fmt.Sprintf("nested deeper than %d levels", policy.MaxDepth)) {
			t.Fatalf("%s body of %d bytes: %v %d %.300s", name, len(body), err, r.Status, r.Raw)
		}
	}
	if r := proctest.MustGet(t, n.URL()+"/check/alice"); r.Status != 200 {
		t.Fatalf("node after the nested bodies: %d %s", r.Status, r.Raw)
	}
	if after := peakRSSMB(t, n.Pid()); after > before+200 {
		t.Fatalf("peak memory went from %d MB to %d MB on a refused body", before, after)
	}
}

// The policy table holds at most policy.MaxPolicies: one more is a 409
// too_many_policies that writes nothing, a change to an existing policy
// still goes through, and a seed file past the cap is refused at start.
func TestPolicyTableCap(t *testing.T) {
	dir := t.TempDir()
	writeSeed := func(name string, n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "- {name: p%d, algorithm: fixed_window, limits: [{limit: 1, window: 1s}]}\n", i)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	full := writeSeed("full.yaml", policy.MaxPolicies-1) // and default
	n := proctest.StartNode(t, rlnodeBin, "cap", "--policies", full)
	proctest.WaitReady(t, n, 30*time.Second)
	body := `{"algorithm":"fixed_window","limits":[{"limit":5,"window":"1s"}]}`
	r := mustDo(t, "PUT", n.URL()+"/v1/policies/one-more", "", body)
	if r.Status != 409 || r.JSON["code"] != "too_many_policies" || !strings.Contains(fmt.Sprint(r.JSON["detail"]), strconv.Itoa(policy.MaxPolicies)) {
		t.Fatalf("policy %d: %d %s", policy.MaxPolicies+1, r.Status, r.Raw)
	}
	if r := proctest.MustGet(t, n.URL()+"/v1/policies/one-more"); r.Status != 404 {
		t.Fatalf("the refused policy was written: %d %s", r.Status, r.Raw)
	}
	if r := mustDo(t, "PUT", n.URL()+"/v1/policies/p7", "", body); r.Status != 200 {
		t.Fatalf("changing an existing policy at the cap: %d %s", r.Status, r.Raw)
	}
	over := writeSeed("over.yaml", policy.MaxPolicies+1)
	_, stderr, code := proctest.Run(t, rlnodeBin, nil, "serve", "--policies", over, "--data-dir", t.TempDir())
	if code != 2 || !strings.Contains(stderr, fmt.Sprintf("at most %d", policy.MaxPolicies)) {
		t.Fatalf("serve with %d policies in its seed: exit %d %s", policy.MaxPolicies+1, code, stderr)
	}
}

// An envoyproxy/ratelimit file whose aliases expand to millions of
// descriptors is refused, before anything is built, by the cap on values.
func TestImportEnvoyAliasBombIsRefused(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: bomb\ndescriptors:\n")
	// Level i is a list of eight descriptors, each holding level i-1:
	// 8^7 descriptors in a 2 KB file.
	b.WriteString("  - key: l0\n    descriptors: &l0\n")
	for j := range 8 {
		fmt.Fprintf(&b, "      - {key: k0, value: v%d, rate_limit: {unit: second, requests_per_unit: 1}}\n", j)
	}
	for i := 1; i < 7; i++ {
		fmt.Fprintf(&b, "  - key: l%d\n    descriptors: &l%d\n", i, i)
		for j := range 8 {
			fmt.Fprintf(&b, "      - {key: k%d, value: v%d, descriptors: *l%d}\n", i, j, i-1)
		}
	}
	file := filepath.Join(t.TempDir(), "bomb.yaml")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	closed := proctest.FreeAddr(t) // nothing listens: parsing must fail first
	_, stderr, code := proctest.Run(t, rlnodeBin, nil, "policy", "import-envoy", "--dry-run", "--addr", "http://"+closed, file)
	if code != 2 || !strings.Contains(stderr, fmt.Sprintf("more than %d values once its YAML aliases are expanded", policy.MaxValues)) {
		t.Fatalf("alias bomb of %d bytes: exit %d %s", b.Len(), code, stderr)
	}
}

// A FIFO given as a policy file is refused at once with its name: the
// open does not wait for a writer (it did, until SIGTERM).
func TestPolicyApplyRefusesAFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "policies.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	p := proctest.Start(t, rlnodeBin, "apply", "policy", "apply", "-f", fifo, "--addr", "http://"+proctest.FreeAddr(t))
	if code := p.Wait(30 * time.Second); code != 2 || !strings.Contains(p.Output(), fifo+" is a named pipe (FIFO)") {
		t.Fatalf("policy apply -f FIFO: exit %d (-1: still running), want 2 naming the FIFO; output:\n%s", code, p.Output())
	}
}
