#!/bin/sh
# Makes the round-3 fixtures, written by the previous release (bd9eb85,
# log and snapshot format 3) running as a real node:
#   cmd/rlnode/testdata/v3-data.tar.gz  its whole data dir (wal log, stable
#                                       store, snapshot), stopped cleanly
#   fsm/testdata/v3-snapshot.bin        the snapshot's state.bin alone
# Build that release first:
#   git worktree add /tmp/bd9 bd9eb85 && (cd /tmp/bd9 && go build -o /tmp/rlnode-bd9 ./cmd/rlnode)
#   scripts/make-v3-fixture.sh /tmp/rlnode-bd9
# The node gets one policy of each algorithm (fixed window, epoch-aligned
# fixed window, sliding window with two limits, token bucket) and a leased
# one, hits on each, and two live lease grants of the leased policy (held
# by holders h1 and h2 for 60 s), then a snapshot; one more hit after the
# snapshot leaves a format-3 log entry behind it. fsm's
# TestRestoreVersion3Snapshot and cmd/rlnode's TestVersion3DataDirServes
# read them.
set -eu
bin=$1
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null; rm -rf "$work"' EXIT
http=127.0.0.1:18690
"$bin" serve --id n1 --http-addr $http --raft-addr 127.0.0.1:18691 \
  --data-dir "$work/n1" --raft-log wal >"$work/log" 2>&1 &
pid=$!
until curl -sf http://$http/readyz >/dev/null; do sleep 0.2; done
cat >"$work/policies.yaml" <<'YAML'
policies:
  - {name: default, algorithm: fixed_window, limits: [{limit: 10, window: 1h}]}
  - {name: fw, algorithm: fixed_window, limits: [{limit: 5, window: 1h}]}
  - {name: epoch, algorithm: fixed_window, align: epoch, limits: [{limit: 6, window: 24h}]}
  - {name: sw, algorithm: sliding_window, limits: [{limit: 5, window: 1h}, {limit: 50, window: 24h}]}
  - {name: tb, algorithm: token_bucket, limits: [{limit: 5, window: 1h, burst: 8}]}
  - {name: api, algorithm: fixed_window, consistency: leased, limits: [{limit: 100, window: 1h}]}
YAML
"$bin" policy apply --addr http://$http -f "$work/policies.yaml" >/dev/null
hit() { curl -sf "http://$http/check/$1/$2" >/dev/null; }
hit fw alice; hit fw alice; hit fw alice
hit epoch alice
hit sw alice; hit sw alice
hit tb alice; hit tb alice; hit tb alice; hit tb alice
lease() {
  curl -sf -X POST http://$http/v1/leases -H 'Content-Type: application/json' \
    -d "{\"policy\":\"api\",\"client\":\"bob\",\"holder\":\"$1\",\"want\":$2,\"leaseMs\":60000}" >>"$work/n1/fixture-grants"
}
lease h1 30; lease h2 20
curl -sf -X POST http://$http/v1/cluster/snapshot >/dev/null
hit fw bob
curl -sf http://$http/v1/status | sed -n 's/.*"appliedNow":\([0-9]*\).*/\1/p' >"$work/n1/fixture-applied-now"
kill -TERM $pid; wait $pid || true
tar -C "$work" -czf "$root/cmd/rlnode/testdata/v3-data.tar.gz" n1
cp "$work"/n1/snapshots/*/state.bin "$root/fsm/testdata/v3-snapshot.bin"
echo "wrote cmd/rlnode/testdata/v3-data.tar.gz ($(wc -c <"$root/cmd/rlnode/testdata/v3-data.tar.gz") bytes), fsm/testdata/v3-snapshot.bin"
cat "$work/n1/fixture-grants"
