package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// longRegions skips the multi-cluster runs (nine rlnode processes, about
// a minute each) unless RLNODE_LONG_TESTS=1, as cmd/rlnode's long
// process tests, or the run names tests with -run.
func longRegions(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("multi-cluster run: nine rlnode processes")
	}
	if f := flag.Lookup("test.run"); os.Getenv("RLNODE_LONG_TESTS") != "1" && (f == nil || f.Value.String() == "") {
		t.Skip("multi-cluster run: runs with RLNODE_LONG_TESTS=1 or when named with -run")
	}
}

// regionsBinDir holds the rlnode binary the multi-cluster runs share;
// TestMain removes it.
var regionsBinDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if regionsBinDir != "" {
		os.RemoveAll(regionsBinDir)
	}
	os.Exit(code)
}

// regionsBinary builds rlnode once for every multi-cluster run of the
// test binary.
var regionsBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "jl-regions-bin")
	if err != nil {
		return "", err
	}
	regionsBinDir = dir
	bin := filepath.Join(dir, "rlnode")
	build := exec.Command("go", "build", "-o", bin, "./cmd/rlnode")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		return "", &buildError{err, string(out)}
	}
	return bin, nil
})

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

// runRegions runs jepsen-lite --regions with args and returns its exit
// code, its last line and summary.json.
func runRegions(t *testing.T, args ...string) (int, string, regionSummary) {
	t.Helper()
	bin, err := regionsBinary()
	if err != nil {
		t.Fatalf("build rlnode: %v", err)
	}
	// Kept when the test fails (its node logs), removed when it passes.
	dir, err := os.MkdirTemp("", "jl-regions-run")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("run kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	out := filepath.Join(dir, "run")
	var stdout, stderr bytes.Buffer
	code := realMain(append([]string{"--regions", "--binary", bin, "--out", out}, args...), &stdout, &stderr)
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	last := lines[len(lines)-1]
	var sum regionSummary
	b, err := os.ReadFile(filepath.Join(out, "summary.json"))
	if err == nil {
		err = json.Unmarshal(b, &sum)
	}
	if err != nil {
		t.Fatalf("summary.json: %v (exit %d, stderr %s, output:\n%s)", err, code, stderr.String(), stdout.String())
	}
	t.Log(last)
	return code, last, sum
}

// TestRegionsModeValidUnderFaults: the multi-cluster mode on real
// processes, with the regional leader killed and paused while it holds
// slices and a region cut off from its parent: VALID (exit 0), every
// listed fault ran, the global check judged allowed hits of more than
// one window, and application holders in the regions (client.Local)
// decided allowed hits in their own processes, judged in the same
// windows.
func TestRegionsModeValidUnderFaults(t *testing.T) {
	longRegions(t)
	code, line, sum := runRegions(t, "--nemesis", "region-kill-leader,region-pause-leader,region-cut",
		"--duration", "24s", "--fault-duration", "4s", "--quiet", "3s", "--final", "5s")
	if code != exitValid || !strings.HasPrefix(line, "jepsen-lite: VALID (regions)") {
		t.Fatalf("exit %d, want VALID: %s\nfailures: %v", code, line, sum.Failures)
	}
	if len(sum.Faults) < 3 || len(sum.Global.Windows) < 2 {
		t.Fatalf("%d faults, %d global windows: the run proved little", len(sum.Faults), len(sum.Global.Windows))
	}
	if sum.Counts["holderLocalAllowed"] == 0 {
		t.Fatalf("no allowed hit was decided in an application holder's process: %s", sum.Holders)
	}
}

// TestRegionsModeCatchesABrokenRegion: region a runs the stand-in that
// spends slices past their deadline (--debug-region-ignore-slice-
// deadline), under the burst demand shape and a cut of region a: the run
// is INVALID (exit 1), with allowed hits spent after the window they
// name. Whether a window's total also went over is logged (the shape
// makes it likely, not certain, in a run this short).
func TestRegionsModeCatchesABrokenRegion(t *testing.T) {
	longRegions(t)
	code, line, sum := runRegions(t, "--broken-region", "--demand-shape", "burst", "--demand", "3",
		"--nemesis", "region-cut", "--fault-region", "a", "--duration", "24s", "--fault-duration", "4s", "--quiet", "3s", "--final", "5s")
	if code != exitInvalid || !strings.HasPrefix(line, "jepsen-lite: INVALID (regions)") {
		t.Fatalf("exit %d, want INVALID: %s", code, line)
	}
	byCheck := map[string]int{}
	byHolders := 0
	for _, v := range sum.Violations {
		byCheck[v.Check]++
		if strings.Contains(v.Detail, "node app-") {
			byHolders++
		}
	}
	if byCheck[checkGlobalAfter] == 0 {
		t.Fatalf("the broken region was caught, but not for spending after its window: %v", byCheck)
	}
	t.Logf("violations by check: %v (a window's total over the limit: %v; hits application holders spent after their window: %d)",
		byCheck, byCheck[checkGlobalDecided] > 0, byHolders)
}
