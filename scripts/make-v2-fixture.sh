#!/usr/bin/env bash
# Writes fsm/testdata/v2-snapshot.bin with the release before leases
# (snapshot version 2): the commit named by $1 (default bc4893f, main when
# leases began) is exported to a temp dir, given a small test that builds
# a policy table and a few keys, and run.
set -euo pipefail
rev=${1:-bc4893f}
root=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git -C "$root" archive "$rev" | tar -x -C "$tmp"
cat >"$tmp/fsm/genv2_test.go" <<'GO'
package fsm

import (
	"os"
	"testing"
	"time"

	"github.com/rlnode/rlnode/policy"
)

func TestWriteV2Fixture(t *testing.T) {
	tf := newTestFSM(t)
	lp := pol("leasedfw", "fixed_window", lim(10, time.Hour))
	lp.Consistency = policy.Leased
	tf.set(pol("fw", "fixed_window", lim(5, time.Hour)), pol("sw", "sliding_window", lim(5, time.Hour)),
		pol("tb", "token_bucket", lim(5, time.Hour)), lp)
	now := int64(1_700_000_000_000)
	tf.check(now, nil, h2("fw", "alice", 3), h2("sw", "alice", 2), h2("tb", "alice", 4), h2("leasedfw", "bob", 7))
	if err := os.WriteFile(os.Getenv("V2_FIXTURE"), persistSnapshot(t, tf.f).Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
GO
(cd "$tmp" && V2_FIXTURE="$root/fsm/testdata/v2-snapshot.bin" go test ./fsm -run TestWriteV2Fixture -count=1)
