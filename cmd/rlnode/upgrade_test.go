package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// TestOldDataDirKeepsItsWindows opens a data dir written by the release
// before replicated policies (testdata/v1-data.tar.gz, made by
// scripts/make-v1-fixture.sh: a version-1 snapshot and version-1 hits
// entries behind it) with this binary: it must replay both, seed the
// default policy from its flags, and keep every window.
func TestOldDataDirKeepsItsWindows(t *testing.T) {
	dir, then := unpackDataFixture(t, "v1-data.tar.gz")
	// The fixture's 1h windows opened when it was made; run the leader's
	// clock at that time so they are still open (applied time never runs
	// backwards, so the node continues from the fixture's applied time).
	offset := time.Duration(then-time.Now().UnixMilli()) * time.Millisecond
	n := proctest.StartNodeIn(t, rlnodeBin, "n1", filepath.Join(dir, "n1"),
		"--limit", "5", "--window", "1h", "--raft-log", "bolt", "--debug-clock-offset", offset.String())
	proctest.WaitReady(t, n, 20*time.Second)

	for client, used := range map[string]int64{"alice": 4, "bob": 1, "carol": 2} {
		r := proctest.MustGet(t, n.URL()+"/v1/status/"+client)
		if r.Status != 200 || r.Num("used") != used || r.JSON["active"] != true {
			t.Fatalf("status of %s after upgrade: %d %s; want %d used in an open window", client, r.Status, r.Raw, used)
		}
	}
	if r := proctest.MustGet(t, n.URL()+"/check/alice"); r.Status != 200 || r.Num("remaining") != 0 {
		t.Fatalf("alice's fifth hit: %d %s; want allowed with 0 remaining", r.Status, r.Raw)
	}
	if r := proctest.MustGet(t, n.URL()+"/check/alice"); r.Status != 429 {
		t.Fatalf("alice's sixth hit: %d %s; want 429", r.Status, r.Raw)
	}
	out, stderr, code := proctest.Run(t, rlnodeBin, nil, "policy", "list", "--addr", n.URL())
	if code != 0 || !strings.Contains(out, "default") || !strings.Contains(out, "5/1h") {
		t.Fatalf("policy list after upgrade: exit %d\n%s%s", code, out, stderr)
	}
}

// unpackDataFixture unpacks testdata/name (a data dir made by a
// scripts/make-v*-fixture.sh) into a temporary dir and returns it with
// the fixture's applied time (Unix ms, its n1/fixture-applied-now), at
// which a test runs the node's clock so the fixture's windows are open.
func unpackDataFixture(t *testing.T, name string) (dir string, appliedMs int64) {
	t.Helper()
	dir = t.TempDir()
	if out, err := exec.Command("tar", "-xzf", filepath.Join("testdata", name), "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("unpack fixture %s: %v\n%s", name, err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "n1", "fixture-applied-now"))
	if err != nil {
		t.Fatal(err)
	}
	appliedMs, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return dir, appliedMs
}
