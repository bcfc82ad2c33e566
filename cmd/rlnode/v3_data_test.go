package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// TestVersion3DataDirServes opens the data dir the previous release
// (bd9eb85, format 3) wrote as a real node (testdata/v3-data.tar.gz, made
// by scripts/make-v3-fixture.sh: a snapshot with every algorithm's policy,
// windows and two live lease grants, and a format-3 log entry behind it)
// with this binary: it must replay both and decide on from them.
func TestVersion3DataDirServes(t *testing.T) {
	proctest.Long(t)
	dir, then := unpackDataFixture(t, "v3-data.tar.gz")
	// Run the leader's clock at the fixture's time, so its 1h windows and
	// its 60 s grants are still open. The start takes a moment of real
	// time, and a leader whose clock is ahead of the applied time by more
	// than --max-clock-offset treats it as an outage to catch up from: it
	// grants nothing until the fixture's grants have ended (cluster time,
	// fsm/DESIGN.md). A wide offset keeps this start an ordinary one.
	offset := time.Duration(then-time.Now().UnixMilli()) * time.Millisecond
	n := proctest.StartNodeIn(t, rlnodeBin, "n1", filepath.Join(dir, "n1"), "--debug-clock-offset", offset.String(),
		"--max-clock-offset", "30s")
	proctest.WaitReady(t, n, 20*time.Second)

	proctest.Poll(t, 20*time.Second, func() error {
		out, stderr, code := proctest.Run(t, rlnodeBin, nil, "policy", "list", "--addr", n.URL())
		for _, want := range []string{"api", "leased", "epoch", "sliding_window", "token_bucket", "5/1h"} {
			if code != 0 || !strings.Contains(out, want) {
				return fmt.Errorf("policy list of the v3 data dir lacks %q: exit %d\n%s%s", want, code, out, stderr)
			}
		}
		return nil
	})
	for _, c := range []struct {
		path string
		used int64
	}{{"fw/alice", 3}, {"fw/bob", 1}, {"sw/alice", 2}, {"epoch/alice", 1}} {
		r := proctest.MustGet(t, n.URL()+"/v1/status/"+c.path)
		if r.Status != 200 || r.Num("used") != c.used {
			t.Fatalf("status of %s: %d %s; want %d used", c.path, r.Status, r.Raw, c.used)
		}
	}
	// The grants (30 + 20 of api/bob's 100) still count: a new holder gets
	// at most the 50 left.
	granted := int64(0)
	for i := 0; i < 10; i++ {
		r, err := n.Do("POST", "/v1/leases", "", map[string]any{"policy": "api", "client": "bob", "holder": "h3", "want": 80, "leaseMs": 2000})
		if err != nil || r.Status != 200 {
			t.Fatalf("lease after upgrade: %v %d %s", err, r.Status, r.Raw)
		}
		if r.Num("units") == 0 {
			break
		}
		granted += r.Num("units")
	}
	if granted != 50 {
		t.Fatalf("a new holder was granted %d of api/bob; the fixture's grants left 50", granted)
	}
}
