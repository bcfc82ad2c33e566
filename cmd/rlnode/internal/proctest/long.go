package proctest

import (
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlnode/rlnode/internal/testprog"
)

// EnvLong names the variable that runs the long process tests (clusters
// killed and restarted, TLS rotation, corruption, upgrades, Docker):
// RLNODE_LONG_TESTS=1, which .ci/run sets (or naming them with -run).
// Without it a plain `go test ./...` skips them and stays a few minutes, printing a line per
// package as it goes; together they take longer than go test's default
// 10-minute timeout on a small machine.
const EnvLong = "RLNODE_LONG_TESTS"

// longSkipped counts this test binary's long tests skipped, for
// LongSkippedLine.
var longSkipped atomic.Int64

// LongEnabled reports whether the long process tests run: not with
// -short; else with RLNODE_LONG_TESTS=1, or when the run names tests
// (-run), so `go test ./cmd/rlnode -run TestComposeCluster`, as the docs
// show, runs the test it names.
func LongEnabled() bool {
	if testing.Short() {
		return false
	}
	if os.Getenv(EnvLong) == "1" {
		return true
	}
	f := flag.Lookup("test.run")
	return f != nil && f.Value.String() != ""
}

// Long skips a process test that takes seconds unless LongEnabled, and
// otherwise says every 30 s what it is doing (see progress.go).
func Long(t testing.TB) {
	t.Helper()
	if !LongEnabled() {
		longSkipped.Add(1)
		t.Skipf("long process test: runs with %s=1 (as CI does) or when named with -run", EnvLong)
	}
	heartbeat(t)
}

// LongSkippedLine is the one line a package's TestMain shows after its
// tests when it skipped long ones, so a newcomer knows what did not run
// and how to run it; "" when none was skipped.
func LongSkippedLine(pkg string) string {
	n := longSkipped.Load()
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%s: %d long process tests skipped; %s=1 go test -timeout 30m ./%s runs them (CI does)", pkg, n, EnvLong, pkg)
}

// PackageHeartbeat says every HeartbeatEvery (or $RLNODE_TEST_HEARTBEAT)
// that pkg's tests are still running, through testprog.Say (the
// terminal): go test prints nothing of a package until it ends, and
// cmd/rlnode's process tests take minutes even without the long ones. The
// long tests say more of themselves, so with them it says nothing. stop
// ends it; call it before the package's closing lines.
func PackageHeartbeat(pkg string) (stop func()) {
	if os.Getenv(EnvLong) == "1" {
		// (The env var alone: TestMain calls this before -short is parsed.)
		return func() {}
	}
	start := time.Now()
	return every(heartbeatEvery(), func() {
		testprog.Say(fmt.Sprintf("... %s: tests running for %s", pkg, time.Since(start).Round(time.Second)))
	})
}
