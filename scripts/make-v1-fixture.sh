#!/bin/sh
# Makes cmd/rlnode/testdata/v1-data.tar.gz: the data dir of a one-node
# cluster written by the release BEFORE replicated policies (run it with that
# release's binary: git worktree add /tmp/v1 9657e37 && (cd /tmp/v1 && go
# build -o /tmp/rlnode-v1 ./cmd/rlnode)). The node runs --limit 5 --window 1h;
# alice spends 3 hits and bob 1 before a snapshot, then carol 2 and alice 1
# more after it, so the fixture holds a version-1 snapshot AND version-1 log
# entries behind it. TestOldDataDirKeepsItsWindows opens it with the new code.
#
#   scripts/make-v1-fixture.sh /tmp/rlnode-v1
set -eu
bin=$1
out=$(cd "$(dirname "$0")/.." && pwd)/cmd/rlnode/testdata/v1-data.tar.gz
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null; rm -rf "$work"' EXIT
"$bin" serve --id n1 --http-addr 127.0.0.1:18590 --raft-addr 127.0.0.1:18591 \
  --data-dir "$work/n1" --limit 5 --window 1h >"$work/log" 2>&1 &
pid=$!
until curl -sf http://127.0.0.1:18590/readyz >/dev/null; do sleep 0.2; done
hit() { curl -sf "http://127.0.0.1:18590/check/$1" >/dev/null; }
hit alice; hit alice; hit alice; hit bob
curl -sf -X POST http://127.0.0.1:18590/v1/cluster/snapshot >/dev/null
hit carol; hit carol; hit alice
curl -sf http://127.0.0.1:18590/v1/status | sed -n 's/.*"appliedNow":\([0-9]*\).*/\1/p' >"$work/n1/fixture-applied-now"
kill -TERM $pid; wait $pid || true
tar -C "$work" -czf "$out" n1
echo "wrote $out ($(wc -c <"$out") bytes)"
