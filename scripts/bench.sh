#!/usr/bin/env bash
# Cluster benchmark: builds rlnode, starts one local 3-node cluster per Raft
# log store asked for (127.0.0.1, free ports, data in a temp dir), and the
# Redis-backed baseline (redis-server + bench/redislimiter), then drives them
# all with the same `rlnode bench` in one run, repetitions interleaved
# (A B A B ..., who goes first rotating), and prints medians, the worst repetition's p99, ratios and
# the targets, each PASS or MISS, and every server's CPU-seconds per 100k
# requests (from /proc, user+system, during each run).
#
# Usage: scripts/bench.sh            (from anywhere; builds from this checkout)
#
# Each repetition runs, in this order (closed loop = N workers back to back;
# open loop = fixed request rate; K = each log store in BENCH_RAFT_LOGS):
#   livez-64            GET /livez on the first cluster's leader, 64 workers:
#                       the HTTP ceiling of one node with the same client
#   K-check-64, redis-check-64
#                       GET /check/{key} on K's leader / on the baseline
#   K-check-256, redis-check-256     the same at 256 workers
#   K-followers-64      /check round-robin over K's two followers (forwarded)
#   K-open-half         open loop on K's leader at half of K-check-64's rate
#   (BENCH_RUNS has "leased"; its policies are made once, after the clusters)
#   K-leased-64, K-leased-256
#                       GET /check/lhot/{key} on K's leader: a leased fixed
#                       window (limit 10^9 per 60s) over BENCH_LEASED_KEYS
#                       hot keys, decided from the leader's leases
#   K-leased-followers-64  the same round-robin over K's two followers
#   K-leased-all-64     the same over all three nodes
#   K-hot-check-64      the same hot keys through a strict policy (hstrict)
#                       on K's leader: strict and leased on equal keys
#   (BENCH_RUNS has "zipf"; interleaved with the baseline's own Zipf runs)
#   K-zipf-leased-64, K-zipf-leased-256, redis-zipf-64, redis-zipf-256
#                       GET /check/lzipf/{key} on K's leader (a leased fixed
#                       window, limit 10^9 per 60s) / /check/{key} on the
#                       baseline, BENCH_ZIPF_KEYS keys drawn by a Zipf law
#                       (s = BENCH_ZIPF_S; wrk: the exponent as given,
#                       rlnode bench: its fixed 1.1): a few hot keys and a
#                       long warm tail
#   K-zipf-leased-followers-64  the same round-robin over K's two followers
#   K-leased-cap-64     GET /check/lcap/{key} over all three nodes: a leased
#                       fixed window of BENCH_LEASED_CAP per 1s on 4 keys,
#                       demand far above it; the report gives the share of
#                       the limit admitted (under-admission)
#   (BENCH_RUNS has "fastpath": issue 28's runs, after the leased ones)
#   livez-256           GET /livez on the first cluster's leader, 256 workers
#   K-hot-check-256, redis-hot-64, redis-hot-256
#                       strict /check/hstrict/{key} on K's leader at 256
#                       workers, and the baseline, on BENCH_LEASED_KEYS keys
#   K-hot-followers-64  strict hot keys round-robin over K's two followers
#   K-zipf-strict-256   strict /check/hstrict/{key} on K's leader, 256
#                       workers, BENCH_ZIPF_STRICT_KEYS keys drawn by Zipf
#                       (rlnode bench --dist zipf, s=1.1, with its trace)
#   (BENCH_RUNS has "rls": issue 40's Envoy comparison, interleaved with
#   envoyproxy/ratelimit + Redis; every rlnode node also serves --grpc-addr)
#   K-rls-leased-hot, K-rls-leased-zipf, K-rls-strict-hot, K-rls-strict-zipf
#   envoyrl-rls-leased-hot, ... (the same four)
#                       ShouldRateLimit through one of K's followers (rlnode)
#                       or envoyproxy/ratelimit, 64 calls in flight over 4
#                       HTTP/2 connections (bench/rlsload), one descriptor
#                       {k: v<n>} per call, on BENCH_RLS_HOT_VALUES values
#                       uniform (hot) or BENCH_ZIPF_KEYS values by Zipf
#                       (BENCH_ZIPF_S); domain rlsleased is leased in rlnode,
#                       rlsstrict strict; both are the same YAML (limit 10^9
#                       a minute) in both systems. envoyproxy/ratelimit is
#                       built from the Go module proxy at
#                       BENCH_ENVOY_RATELIMIT in a module under the temp dir
#                       (never rlnode's go.mod), with its own redis-server
# and after all repetitions, once per repetition and log store:
#   K-snapshot-64       /check on K's leader at 64 workers (rlnode bench, for
#                       its per-second trace) over BENCH_SNAPSHOT_KEYS live
#                       windows (filled first, 64 hits per POST /v1/check),
#                       while the leader takes a snapshot a third of the way in
#
# Targets (per log store, on medians unless said):
#   check@256 / redis@256 >= 1.0      check@64 / redis@64 >= 0.75
#   followers@64 / check@64 >= 0.8    check@256 >= check@64
#   p99 check@64 <= 10 ms and p99 check@256 <= 20 ms in EVERY repetition
#   open-loop p99 at half rate <= 5 ms (median)
#   zipf: leased@64 / redis@64 >= 1.5 and leased@256 / redis@256 >= 1.5,
#   leased followers / leader @64 >= 0.9
#   p99 through a snapshot of BENCH_SNAPSHOT_KEYS windows <= 20 ms, every
#   repetition
#   rls: through a follower, leased hot and leased zipf / envoyrl >= 1.5,
#   strict hot and strict zipf / envoyrl >= 0.9
#
# Environment:
#   BENCH_RAFT_LOGS  log stores to measure, space-separated (default "wal bolt")
#   BENCH_VARIANTS   instead: any systems, "name=serve flags;name=serve flags"
#                    (e.g. "ae256=--raft-max-append-entries 256;ae64=--raft-max-append-entries 64");
#                    names are [a-z0-9_]+
#   BENCH_RUNS       which runs, of "livez check followers open snapshot
#                    leased zipf fastpath rls" (the default: all but leased,
#                    zipf, fastpath and rls)
#   BENCH_LEASED_KEYS  hot keys of the leased runs (default 16)
#   BENCH_LEASED_CAP   limit per second per key of K-leased-cap-64 (default 2000)
#   BENCH_ZIPF_KEYS    keys of the zipf runs (default 10000)
#   BENCH_ZIPF_S       their Zipf exponent (default 1.07)
#   BENCH_SNAPSHOT_KEYS  live windows in the snapshot runs (default 1000000)
#   BENCH_REPS       interleaved repetitions (default 3)
#   BENCH_RUNS=fastpath  issue 28's comparison (the runs above; with
#                    "livez leased fastpath" every ratio of its Targets)
#   BENCH_ZIPF_STRICT_KEYS  keys of K-zipf-strict-256 (default 10000)
#   BENCH_RLS_HOT_VALUES  descriptor values of the rls hot runs (default 100)
#   BENCH_ENVOY_RATELIMIT  envoyproxy/ratelimit's version for the rls runs
#                    (default the pinned pseudo-version below; needs the Go
#                    module proxy once, then the module cache)
#   BENCH_BASELINE   0 skips the Redis baseline (default 1; skipped with a
#                    message when redis-server is not installed)
#   BENCH_DURATION   measured length of each run (default 10s, a Go duration)
#   BENCH_WARMUP     unmeasured warmup before each run (default 1s)
#   BENCH_KEYS       distinct client ids, uniform (default 10000)
#   BENCH_CLIENT     load generator of the closed-loop runs: wrk (the default
#                    when installed; Debian: apt-get install wrk) or rlnode
#                    (`rlnode bench`). A Go client costs about as much CPU per
#                    request as the server it measures, and here it shares the
#                    two cores with every server; wrk costs far less. Open-loop
#                    runs always use rlnode bench (wrk has no fixed rate).
#   BENCH_TRACE      1 adds a per-second p99/max trace to every rlnode bench
#                    run's JSON and prints the worst second of each run
#                    (default 1; wrk runs have no trace)
#   BENCH_OUT        results dir (default ./bench-out/<timestamp>); gets one
#                    JSON file per run, summary.txt and env.txt
#   BENCH_KEEP=1     keep the temp dir (node logs, data) and copy the node logs
#                    into the results dir
#   BENCH_STRICT=1   exit 1 if any target is missed (default: report only)
#   BENCH_NODE_ARGS  extra `rlnode serve` flags for every node
#   GO               go command (default: go)
#
# Needs bash, go and python3; wrk for the default client; redis-server (Debian: apt-get install
# redis-server) for the baseline. The client, every cluster and Redis share
# this machine's CPUs, so the numbers compare systems within one run; they
# are not what one node per host would do. Idle clusters only heartbeat.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
go="${GO:-go}"
duration="${BENCH_DURATION:-10s}"
warmup="${BENCH_WARMUP:-1s}"
keys="${BENCH_KEYS:-10000}"
reps="${BENCH_REPS:-3}"
read -r -a kinds <<<"${BENCH_RAFT_LOGS:-wal bolt}"
# Each system under test is a name and its `rlnode serve` flags: one per
# log store, or BENCH_VARIANTS for any A/B of flags.
declare -A sys_flags
if [ -n "${BENCH_VARIANTS:-}" ]; then
	kinds=()
	IFS=';' read -r -a variants <<<"$BENCH_VARIANTS"
	for v in "${variants[@]}"; do
		name="${v%%=*}"
		case "$name" in '' | redis | *[!a-z0-9_]*) echo "bench: BENCH_VARIANTS: bad name '$name' (want [a-z0-9_]+)" >&2; exit 1 ;; esac
		kinds+=("$name")
		sys_flags[$name]="${v#*=}"
	done
else
	for k in "${kinds[@]}"; do
		case "$k" in wal | bolt) ;; *) echo "bench: BENCH_RAFT_LOGS: unknown log store $k (want wal or bolt)" >&2; exit 1 ;; esac
		sys_flags[$k]="--raft-log $k"
	done
fi
read -r -a run_set <<<"${BENCH_RUNS:-livez check followers open snapshot}"
leased_keys="${BENCH_LEASED_KEYS:-16}"
leased_cap="${BENCH_LEASED_CAP:-2000}"
zipf_keys="${BENCH_ZIPF_KEYS:-10000}"
zipf_s="${BENCH_ZIPF_S:-1.07}"
snap_keys="${BENCH_SNAPSHOT_KEYS:-1000000}"
rls_hot_values="${BENCH_RLS_HOT_VALUES:-100}"
# envoyproxy/ratelimit has no releases for years; main at a fixed commit.
envoy_rl_version="${BENCH_ENVOY_RATELIMIT:-v1.4.1-0.20260122083618-3fb702589d36}"
want_run() { [[ " ${run_set[*]} " == *" $1 "* ]]; }
baseline="${BENCH_BASELINE:-1}"
trace="${BENCH_TRACE:-1}"
client="${BENCH_CLIENT:-}"
read -r -a node_args <<<"${BENCH_NODE_ARGS:-}"
stamp="$(date +%Y%m%d-%H%M%S)"
out="${BENCH_OUT:-./bench-out/$stamp}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

say() { printf 'bench: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

command -v "$go" >/dev/null || die "$go not found in PATH (set GO=/path/to/go)"
command -v python3 >/dev/null || die "need python3 (free ports, JSON, report)"
[ "${#kinds[@]}" -gt 0 ] || die "no system to measure (BENCH_RAFT_LOGS or BENCH_VARIANTS is empty)"
case "$client" in
'')
	if command -v wrk >/dev/null; then client=wrk; else
		client=rlnode
		say "wrk not installed: closed-loop runs use rlnode bench, whose Go client takes a large share of the CPU (Debian: apt-get install wrk)"
	fi
	;;
wrk) command -v wrk >/dev/null || die "BENCH_CLIENT=wrk but wrk is not installed (Debian: apt-get install wrk)" ;;
rlnode) ;;
*) die "BENCH_CLIENT: unknown client $client (want wrk or rlnode)" ;;
esac
# wrk takes whole seconds.
secs() { python3 -c '
import re, sys
m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)", sys.argv[1])
if not m: sys.exit("bench: %s: want a duration like 10s, 500ms or 1m" % sys.argv[1])
v = float(m[1]) * {"ms": 0.001, "s": 1, "m": 60}[m[2]]
print(round(v))' "$1"; }
duration_s="$(secs "$duration")" || exit 1
warmup_s="$(secs "$warmup")" || exit 1
if [ "$client" = wrk ] && [ "$duration_s" -lt 1 ]; then die "BENCH_DURATION $duration: wrk needs at least 1s"; fi

# ---- cleanup: stop what we started, remove the temp dir ----

tmp="$(mktemp -d "${TMPDIR:-/tmp}/rlnode-bench.XXXXXX")"
pids=()
bench_pid=""

stop_all() {
	local pid alive
	if [ -n "$bench_pid" ]; then kill "$bench_pid" 2>/dev/null || true; fi
	for pid in ${pids[@]+"${pids[@]}"}; do kill -TERM "$pid" 2>/dev/null || true; done
	for _ in $(seq 1 100); do # up to 10s for a graceful exit
		alive=0
		for pid in ${pids[@]+"${pids[@]}"}; do
			if kill -0 "$pid" 2>/dev/null; then alive=1; fi
		done
		if [ "$alive" = 0 ]; then break; fi
		sleep 0.1
	done
	for pid in ${pids[@]+"${pids[@]}"}; do kill -KILL "$pid" 2>/dev/null || true; done
	for pid in ${pids[@]+"${pids[@]}"}; do wait "$pid" 2>/dev/null || true; done
	pids=()
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	stop_all
	if [ "${BENCH_KEEP:-0}" = 1 ]; then
		cp "$tmp"/*.log "$out"/ 2>/dev/null || true
		say "kept $tmp (node logs and data); logs also copied to $out"
	else
		rm -rf "$tmp"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT
trap 'say "terminated"; exit 143' TERM

# jget FILE PATH: prints the value at a dotted PATH (e.g. .latencyMs.p99).
jget() {
	python3 - "$1" "$2" <<-'EOF'
		import json, sys
		v = json.load(open(sys.argv[1]))
		for k in sys.argv[2].strip(".").split("."):
		    if k == "":
		        continue
		    v = v.get(k) if isinstance(v, dict) else None
		    if v is None:
		        break
		if v is not None:
		    print(str(v).lower() if isinstance(v, bool) else v)
	EOF
}

# free_ports N: N free ports from the kernel. There is a small race between
# closing them here and the servers binding them; a clash shows up as a
# failed start.
free_ports() {
	python3 -c '
import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))
for s in ss: s.close()
' "$1"
}

# ---- build ----

say "building rlnode"
(cd "$repo" && "$go" build -o "$tmp/rlnode" ./cmd/rlnode)
rl="$tmp/rlnode"

if [ "$baseline" = 1 ]; then
	if ! command -v redis-server >/dev/null; then
		say "redis-server not installed: skipping the Redis baseline (Debian: apt-get install redis-server)"
		baseline=0
	else
		say "building bench/redislimiter"
		if ! (cd "$repo/bench/redislimiter" && "$go" build -o "$tmp/redislimiter" .) >"$tmp/redislimiter-build.log" 2>&1; then
			cat "$tmp/redislimiter-build.log" >&2
			say "could not build bench/redislimiter: skipping the Redis baseline"
			baseline=0
		fi
	fi
fi

envoyrl=0 # 1: envoyproxy/ratelimit + Redis beside the rls runs
if want_run rls; then
	say "building bench/rlsload"
	(cd "$repo" && "$go" build -o "$tmp/rlsload" ./bench/rlsload)
	if ! command -v redis-server >/dev/null; then
		say "redis-server not installed: the rls runs go without envoyproxy/ratelimit (Debian: apt-get install redis-server)"
	else
		say "building envoyproxy/ratelimit $envoy_rl_version (Go module proxy) in $tmp/envoyrl"
		mkdir -p "$tmp/envoyrl"
		if (cd "$tmp/envoyrl" && "$go" mod init rlnode.bench/envoyratelimit &&
			"$go" mod edit -require="github.com/envoyproxy/ratelimit@$envoy_rl_version" &&
			GOFLAGS=-mod=mod "$go" build -o "$tmp/envoy-ratelimit" github.com/envoyproxy/ratelimit/src/service_cmd) >"$tmp/envoyrl-build.log" 2>&1; then
			envoyrl=1
		else
			cat "$tmp/envoyrl-build.log" >&2
			say "could not build envoyproxy/ratelimit: the rls runs go without it"
		fi
	fi
fi

# ---- clusters ----

declare -A leader_url follower_urls leader_id follower_grpc
cpu_procs=() # label:pid of every server, for CPU-seconds per run
url() { printf 'http://127.0.0.1:%s' "$1"; }

wait_healthy() { # name url pid log
	for _ in $(seq 1 300); do # 30s
		"$rl" health --addr "$2" >/dev/null 2>&1 && return 0
		kill -0 "$3" 2>/dev/null || { cat "$4" >&2; die "$1 exited"; }
		sleep 0.1
	done
	cat "$4" >&2
	die "$1 not ready at $2 after 30s"
}

start_cluster() { # kind
	local kind=$1 i id ports http=() raftp=() grpcp=() npids=() leader="" ids
	read -r -a ports <<<"$(free_ports 9)"
	http=("${ports[@]:0:3}")
	raftp=("${ports[@]:3:3}")
	grpcp=("${ports[@]:6:3}")
	for i in 0 1 2; do
		id="n$((i + 1))"
		local join=()
		if [ "$i" != 0 ]; then join=(--join "$(url "${http[0]}")"); fi
		if want_run rls; then join+=(--grpc-addr "127.0.0.1:${grpcp[$i]}"); fi
		# shellcheck disable=SC2086 # the system's flags are words
		"$rl" serve --id "$id" ${sys_flags[$kind]} \
			--http-addr "127.0.0.1:${http[$i]}" --raft-addr "127.0.0.1:${raftp[$i]}" \
			--data-dir "$tmp/$kind/$id" --limit 1000000000 --window 60s --log-level warn \
			${join[@]+"${join[@]}"} ${node_args[@]+"${node_args[@]}"} >"$tmp/$kind-$id.log" 2>&1 &
		pids+=("$!")
		npids+=("$!")
		if [ "$i" = 0 ]; then wait_healthy "$kind n1" "$(url "${http[0]}")" "$!" "$tmp/$kind-n1.log"; fi
	done
	for i in 1 2; do wait_healthy "$kind n$((i + 1))" "$(url "${http[$i]}")" "${npids[$i]}" "$tmp/$kind-n$((i + 1)).log"; done
	# The leader is the node whose own status says so; wait until all three
	# agree on it and the configuration has three voters.
	for _ in $(seq 1 300); do
		ids=()
		leader=""
		for i in 0 1 2; do
			"$rl" status --json --addr "$(url "${http[$i]}")" >"$tmp/status.json" 2>/dev/null || continue
			ids+=("$(jget "$tmp/status.json" .leaderId)")
			if [ "$(jget "$tmp/status.json" .state)" = Leader ]; then leader=$i; fi
		done
		"$rl" peers --json --addr "$(url "${http[0]}")" >"$tmp/peers.json" 2>/dev/null || true
		voters="$(python3 -c 'import json,sys; print(sum(1 for p in json.load(open(sys.argv[1])) if p.get("voter")))' "$tmp/peers.json" 2>/dev/null || echo 0)"
		if [ -n "$leader" ] && [ "${#ids[@]}" = 3 ] && [ "$voters" = 3 ] &&
			[ "${ids[0]}" = "${ids[1]}" ] && [ "${ids[1]}" = "${ids[2]}" ] && [ -n "${ids[0]}" ]; then
			break
		fi
		leader=""
		sleep 0.1
	done
	[ -n "$leader" ] || die "$kind: no agreed leader with 3 voters after 30s"
	for i in 0 1 2; do
		if [ "$i" = "$leader" ]; then cpu_procs+=("$kind-leader:${npids[$i]}"); else cpu_procs+=("$kind-follower$i:${npids[$i]}"); fi
	done
	leader_url[$kind]="$(url "${http[$leader]}")"
	leader_id[$kind]="n$((leader + 1))"
	local f=() fg=()
	for i in 0 1 2; do
		if [ "$i" != "$leader" ]; then f+=("$(url "${http[$i]}")") fg+=("127.0.0.1:${grpcp[$i]}"); fi
	done
	follower_grpc[$kind]="${fg[0]}"
	follower_urls[$kind]="${f[0]},${f[1]}"
	say "$kind cluster: leader ${leader_id[$kind]} ${leader_url[$kind]}, followers ${follower_urls[$kind]}"
}

for k in "${kinds[@]}"; do
	say "starting a 3-node cluster $k: ${sys_flags[$k]}"
	start_cluster "$k"
done

redis_url=""
if [ "$baseline" = 1 ]; then
	read -r rport lport <<<"$(free_ports 2)"
	mkdir -p "$tmp/redis"
	# Redis as people run it for a limiter: in memory, no persistence.
	redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --dir "$tmp/redis" \
		--daemonize no >"$tmp/redis.log" 2>&1 &
	pids+=("$!")
	"$tmp/redislimiter" --addr "127.0.0.1:$lport" --redis "127.0.0.1:$rport" \
		--limit 1000000000 --window 60s >"$tmp/redislimiter.log" 2>&1 &
	lpid=$!
	pids+=("$lpid")
	cpu_procs+=("redis-server:${pids[-2]}" "redislimiter:$lpid")
	redis_url="$(url "$lport")"
	for _ in $(seq 1 100); do
		python3 -c 'import sys,urllib.request; urllib.request.urlopen(sys.argv[1]+"/livez", timeout=1)' "$redis_url" 2>/dev/null && break
		kill -0 "$lpid" 2>/dev/null || { cat "$tmp/redislimiter.log" "$tmp/redis.log" >&2; die "redislimiter exited"; }
		sleep 0.1
	done
	say "Redis baseline: redis-server :$rport, redislimiter $redis_url"
fi

# The rls runs' YAML: one domain leased in rlnode, one strict, alike
# otherwise; envoyproxy/ratelimit reads the same files.
if want_run rls; then
	mkdir -p "$tmp/rlsrt/ratelimit/config"
	for d in rlsleased rlsstrict; do
		printf 'domain: %s\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1000000000}\n' "$d" >"$tmp/rlsrt/ratelimit/config/$d.yaml"
	done
	for k in "${kinds[@]}"; do
		"$rl" policy import-envoy --leased-domain rlsleased --addr "${leader_url[$k]}" "$tmp/rlsrt/ratelimit/config/"*.yaml >/dev/null ||
			die "$k: could not import the rls policies"
	done
fi
envoyrl_addr=""
if [ "$envoyrl" = 1 ]; then
	read -r erport egport ehport edport <<<"$(free_ports 4)"
	mkdir -p "$tmp/envoyrl-redis"
	redis-server --port "$erport" --bind 127.0.0.1 --save "" --appendonly no --dir "$tmp/envoyrl-redis" \
		--daemonize no >"$tmp/envoyrl-redis.log" 2>&1 &
	pids+=("$!")
	erpid=$!
	# envoyproxy/ratelimit exits when Redis does not answer at its start.
	for _ in $(seq 1 100); do
		python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1).close()' "$erport" 2>/dev/null && break
		kill -0 "$erpid" 2>/dev/null || { cat "$tmp/envoyrl-redis.log" >&2; die "envoyproxy/ratelimit's redis-server exited"; }
		sleep 0.1
	done
	# As its README runs it: Redis over TCP, no statsd, the runtime
	# directory read once.
	env USE_STATSD=false LOG_LEVEL=warn REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$erport" \
		RUNTIME_ROOT="$tmp/rlsrt" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
		HOST=127.0.0.1 PORT="$ehport" GRPC_HOST=127.0.0.1 GRPC_PORT="$egport" DEBUG_HOST=127.0.0.1 DEBUG_PORT="$edport" \
		"$tmp/envoy-ratelimit" >"$tmp/envoyrl.log" 2>&1 &
	pids+=("$!")
	cpu_procs+=("envoyrl-redis:$erpid" "envoyrl:$!")
	envoyrl_addr="127.0.0.1:$egport"
	for _ in $(seq 1 100); do
		"$tmp/rlsload" --addr "$envoyrl_addr" --domain rlsstrict --values 1 --concurrency 1 --conns 1 --duration 100ms --warmup 0s >/dev/null 2>&1 && break
		kill -0 "${pids[-1]}" 2>/dev/null || { cat "$tmp/envoyrl.log" >&2; die "envoyproxy/ratelimit exited"; }
		sleep 0.1
	done
	"$tmp/rlsload" --addr "$envoyrl_addr" --domain rlsstrict --values 1 --concurrency 1 --conns 1 --duration 100ms --warmup 0s >/dev/null 2>&1 ||
		{ cat "$tmp/envoyrl.log" >&2; die "envoyproxy/ratelimit answers no call on $envoyrl_addr"; }
	say "envoyproxy/ratelimit $envoy_rl_version on $envoyrl_addr, its redis-server :$erport"
fi

{
	echo "date:       $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "rev:        $(cd "$repo" && git rev-parse --short HEAD 2>/dev/null || echo unknown)$(cd "$repo" && git diff --quiet HEAD 2>/dev/null || echo -dirty)"
	echo "go:         $("$go" version)"
	echo "cpus:       $(getconf _NPROCESSORS_ONLN 2>/dev/null || echo '?')"
	echo "loadavg:    $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')"
	echo "runs:       duration $duration, warmup $warmup, keys $keys uniform, $reps interleaved repetitions"
	if [ "$client" = wrk ]; then echo "client:     closed loop: $(wrk --version 2>&1 | head -1 | cut -d' ' -f1-2), 2 threads; open loop: rlnode bench"; else echo "client:     rlnode bench"; fi
	for k in "${kinds[@]}"; do echo "system:     $k = rlnode serve ${sys_flags[$k]}"; done
	echo "node args:  ${node_args[*]:-(none)}"
	if [ "$baseline" = 1 ]; then echo "baseline:   $(redis-server --version | cut -d' ' -f1-3), in memory (no fsync), redislimiter $redis_url"; else echo "baseline:   skipped"; fi
	if [ "$envoyrl" = 1 ]; then echo "rls peer:   envoyproxy/ratelimit $envoy_rl_version + its own redis-server, in memory; load: bench/rlsload, 64 calls in flight over 4 HTTP/2 connections"; fi
} >"$out/env.txt"

# ---- runs ----

# cpu_seconds: "label seconds" per server (user+system CPU so far).
cpu_seconds() {
	local lp tck
	tck="$(getconf CLK_TCK)"
	for lp in "${cpu_procs[@]}"; do
		awk -v l="${lp%%:*}" -v t="$tck" '{ sub(/^.*\) /, ""); printf "%s %.2f\n", l, ($12 + $13) / t }' "/proc/${lp#*:}/stat" 2>/dev/null || true
	done
}

# run NAME ARGS...: one load run into $out/NAME.json (rlnode bench's --json
# shape), and every server's CPU-seconds during it into $out/NAME.cpu. ARGS
# are `rlnode bench` flags; with BENCH_CLIENT=wrk a closed-loop run (no
# --rate) goes to wrk instead, with the same addresses, path, keys and
# connections.
run() {
	local name=$1
	shift
	if [ "$client" = wrk ] && [ "${run_client:-}" != rlnode ] && [[ " $* " != *" --rate "* ]]; then
		run_wrk "$name" "$@"
		return
	fi
	local extra=()
	if [ "$trace" = 1 ]; then extra=(--trace); fi
	say "run $name: rlnode bench $*"
	if [ -n "${run_zipf:-}" ]; then extra+=(--dist zipf); fi
	measure "$name" "$out/$name.json" "$rl" bench --json --duration "$duration" --warmup "$warmup" \
		--keys "${run_keys:-$keys}" ${extra[@]+"${extra[@]}"} "$@"
}

# measure NAME STDOUT CMD...: runs CMD (stderr to the temp dir), dies with
# its output if it fails or leaves no $out/NAME.json, and writes every
# server's CPU-seconds during it to $out/NAME.cpu.
measure() {
	local name=$1 stdout=$2
	shift 2
	cpu_seconds >"$tmp/cpu-before"
	"$@" >"$stdout" 2>"$tmp/$name.err" &
	bench_pid=$!
	if ! wait "$bench_pid" || [ ! -s "$out/$name.json" ]; then
		bench_pid=""
		if [ "$stdout" != "$out/$name.json" ]; then cat "$stdout" >&2; fi
		cat "$tmp/$name.err" >&2
		die "run $name failed"
	fi
	bench_pid=""
	cpu_seconds | awk 'NR == FNR { b[$1] = $2; next } { printf "%s %.2f\n", $1, $2 - b[$1] }' "$tmp/cpu-before" - >"$out/$name.cpu"
}

# run_wrk NAME --addr URLS [--path P] --concurrency C: run's closed loop on
# wrk, two threads (one per address when there are two), after an
# unmeasured warmup on the same connections count.
run_wrk() {
	local name=$1 addrs="" path=/check/{key} conc=64 first hostports=()
	shift
	while [ $# -gt 0 ]; do
		case "$1" in
		--addr) addrs=$2 ;;
		--path) path=$2 ;;
		--concurrency) conc=$2 ;;
		*) die "run_wrk: unexpected flag $1" ;;
		esac
		shift 2
	done
	IFS=',' read -r -a urls <<<"$addrs"
	first=${urls[0]}
	local threads=2
	if [ "${#urls[@]}" -gt 2 ]; then threads=${#urls[@]}; fi
	for u in "${urls[@]}"; do hostports+=("${u#http://}"); done
	local env=(BENCH_WRK_PATH="$path" BENCH_WRK_KEYS="${run_keys:-$keys}" BENCH_WRK_CONNS="$conc" BENCH_WRK_ZIPF="${run_zipf:-}"
		BENCH_WRK_ADDRS="$(IFS=,; echo "${hostports[*]}")")
	if [ "$warmup_s" -gt 0 ]; then
		env "${env[@]}" BENCH_WRK_OUT=/dev/null wrk -t"$threads" -c"$conc" -d"${warmup_s}s" -s "$repo/scripts/bench_wrk.lua" "$first" >/dev/null 2>&1 || true
	fi
	say "run $name: wrk -t$threads -c$conc -d${duration_s}s $addrs$path"
	measure "$name" "$tmp/$name.wrk" env "${env[@]}" BENCH_WRK_OUT="$out/$name.json" \
		wrk -t"$threads" -c"$conc" -d"${duration_s}s" --timeout 10s -s "$repo/scripts/bench_wrk.lua" "$first"
}

# Leased runs' policies, made once per cluster.
if want_run leased || want_run fastpath; then
	for k in "${kinds[@]}"; do
		"$rl" policy set lhot --algorithm fixed_window --limit 1000000000 --window 60s --consistency leased --addr "${leader_url[$k]}" >/dev/null ||
			die "$k: could not create policy lhot"
		"$rl" policy set hstrict --algorithm fixed_window --limit 1000000000 --window 60s --addr "${leader_url[$k]}" >/dev/null ||
			die "$k: could not create policy hstrict"
		"$rl" policy set lcap --algorithm fixed_window --limit "$leased_cap" --window 1s --consistency leased --addr "${leader_url[$k]}" >/dev/null ||
			die "$k: could not create policy lcap"
	done
fi

# Zipf runs' policy (leased, as lhot), made once per cluster.
if want_run zipf; then
	for k in "${kinds[@]}"; do
		"$rl" policy set lzipf --algorithm fixed_window --limit 1000000000 --window 60s --consistency leased --addr "${leader_url[$k]}" >/dev/null ||
			die "$k: could not create policy lzipf"
	done
fi

# zipf_runs REP KIND: one repetition's Zipf runs of KIND (a cluster or
# redis): BENCH_ZIPF_KEYS keys drawn by a Zipf law (s = BENCH_ZIPF_S), a
# few hot and a long warm tail, on the leased policy lzipf.
zipf_runs() {
	local r=$1 k=$2
	for c in 64 256; do
		if [ "$k" = redis ]; then
			run_keys=$zipf_keys run_zipf=$zipf_s run "r$r-redis-zipf-$c" --addr "$redis_url" --concurrency "$c"
		else
			run_keys=$zipf_keys run_zipf=$zipf_s run "r$r-$k-zipf-leased-$c" --addr "${leader_url[$k]}" --path "/check/lzipf/{key}" --concurrency "$c"
		fi
	done
	if [ "$k" != redis ]; then
		run_keys=$zipf_keys run_zipf=$zipf_s run "r$r-$k-zipf-leased-followers-64" --addr "${follower_urls[$k]}" --path "/check/lzipf/{key}" --concurrency 64
	fi
}

# leased_runs REP KIND: the leased runs of one repetition.
leased_runs() {
	local r=$1 k=$2 all="${leader_url[$2]},${follower_urls[$2]}"
	run_keys=$leased_keys run "r$r-$k-hot-check-64" --addr "${leader_url[$k]}" --path "/check/hstrict/{key}" --concurrency 64
	for c in 64 256; do
		run_keys=$leased_keys run "r$r-$k-leased-$c" --addr "${leader_url[$k]}" --path "/check/lhot/{key}" --concurrency "$c"
	done
	run_keys=$leased_keys run "r$r-$k-leased-followers-64" --addr "${follower_urls[$k]}" --path "/check/lhot/{key}" --concurrency 64
	run_keys=$leased_keys run "r$r-$k-leased-all-64" --addr "$all" --path "/check/lhot/{key}" --concurrency 64
	run_keys=4 run "r$r-$k-leased-cap-64" --addr "$all" --path "/check/lcap/{key}" --concurrency 64
}

# fastpath_runs REP KIND: issue 28's runs of one repetition on KIND (a
# cluster or redis): strict checks of the leased runs' hot keys at 256
# workers and through the followers, the baseline on the same keys, and
# strict checks of a Zipf-drawn 10,000 keys at 256 workers (rlnode bench,
# for its per-second trace: the worst second is the tail spike).
fastpath_runs() {
	local r=$1 k=$2
	if [ "$k" = redis ]; then
		for c in 64 256; do
			run_keys=$leased_keys run "r$r-redis-hot-$c" --addr "$redis_url" --concurrency "$c"
		done
		return
	fi
	run_keys=$leased_keys run "r$r-$k-hot-check-256" --addr "${leader_url[$k]}" --path "/check/hstrict/{key}" --concurrency 256
	run_keys=$leased_keys run "r$r-$k-hot-followers-64" --addr "${follower_urls[$k]}" --path "/check/hstrict/{key}" --concurrency 64
	run_client=rlnode run_keys="${BENCH_ZIPF_STRICT_KEYS:-10000}" run "r$r-$k-zipf-strict-256" --addr "${leader_url[$k]}" \
		--path "/check/hstrict/{key}" --dist zipf --concurrency 256
}

# rls_runs REP KIND: one repetition's ShouldRateLimit runs on KIND (a
# cluster, through a follower, or envoyrl), leased and strict, hot and Zipf.
rls_runs() {
	local r=$1 k=$2 addr mode
	if [ "$k" = envoyrl ]; then addr=$envoyrl_addr; else addr=${follower_grpc[$k]}; fi
	for mode in leased strict; do
		rls_run "r$r-$k-rls-$mode-hot" --addr "$addr" --domain "rls$mode" --values "$rls_hot_values"
		rls_run "r$r-$k-rls-$mode-zipf" --addr "$addr" --domain "rls$mode" --values "$zipf_keys" --zipf "$zipf_s"
	done
}

rls_run() { # NAME rlsload flags...
	local name=$1
	shift
	say "run $name: rlsload $*"
	measure "$name" "$out/$name.json" "$tmp/rlsload" --key k --concurrency 64 --conns 4 --duration "$duration" --warmup "$warmup" "$@"
}

for r in $(seq 1 "$reps"); do
	say "---- repetition $r of $reps"
	# Rotate who goes first each repetition, so no system always follows
	# the same one.
	all=("${kinds[@]}")
	if [ "$baseline" = 1 ]; then all+=(redis); fi
	order=()
	for i in $(seq 0 $((${#all[@]} - 1))); do order+=("${all[$(((i + r - 1) % ${#all[@]}))]}"); done
	if want_run livez; then run "r$r-livez-64" --addr "${leader_url[${kinds[0]}]}" --path /livez --concurrency 64; fi
	for c in 64 256; do
		want_run check || break
		for k in "${order[@]}"; do
			if [ "$k" = redis ]; then
				run "r$r-redis-check-$c" --addr "$redis_url" --concurrency "$c"
			else
				run "r$r-$k-check-$c" --addr "${leader_url[$k]}" --concurrency "$c"
			fi
		done
	done
	for k in "${order[@]}"; do
		[ "$k" != redis ] || continue
		want_run leased || break
		leased_runs "$r" "$k"
	done
	for k in "${order[@]}"; do
		want_run zipf || break
		zipf_runs "$r" "$k"
	done
	if want_run rls; then
		rls_order=("${kinds[@]}")
		if [ "$envoyrl" = 1 ]; then rls_order+=(envoyrl); fi
		for i in $(seq 0 $((${#rls_order[@]} - 1))); do rls_runs "$r" "${rls_order[$(((i + r - 1) % ${#rls_order[@]}))]}"; done
	fi
	for k in "${order[@]}"; do
		[ "$k" != redis ] || continue
		want_run followers || break
		run "r$r-$k-followers-64" --addr "${follower_urls[$k]}" --concurrency 64
	done
	for k in "${order[@]}"; do
		[ "$k" != redis ] || continue
		want_run open || break
		want_run check || die "BENCH_RUNS: open needs check (its rate is half of check@64's)"
		half="$(python3 -c 'import json,sys; print(max(1, round(json.load(open(sys.argv[1]))["throughputRps"] / 2)))' "$out/r$r-$k-check-64.json")"
		run "r$r-$k-open-half" --addr "${leader_url[$k]}" --rate "$half"
	done
	if want_run fastpath; then
		run "r$r-livez-256" --addr "${leader_url[${kinds[0]}]}" --path /livez --concurrency 256
		want_run leased || for k in "${order[@]}"; do
			[ "$k" != redis ] || continue
			run_keys=$leased_keys run "r$r-$k-hot-check-64" --addr "${leader_url[$k]}" --path "/check/hstrict/{key}" --concurrency 64
			for c in 64 256; do
				run_keys=$leased_keys run "r$r-$k-leased-$c" --addr "${leader_url[$k]}" --path "/check/lhot/{key}" --concurrency "$c"
			done
			run_keys=$leased_keys run "r$r-$k-leased-followers-64" --addr "${follower_urls[$k]}" --path "/check/lhot/{key}" --concurrency 64
		done
		for k in "${order[@]}"; do fastpath_runs "$r" "$k"; done
	fi
done

# ---- snapshot runs: a snapshot of snap_keys live windows under load ----

# fill KIND: snap_keys live windows of policy "snap" (fixed window, 1 h) on
# KIND's cluster, 64 hits per POST /v1/check, until the leader counts them.
fill() {
	local k=$1 url=${leader_url[$1]} live=0 wpid
	"$rl" policy set snap --algorithm fixed_window --limit 1000000000 --window 1h --addr "$url" >/dev/null ||
		die "$k: could not create policy snap"
	say "$k: filling $snap_keys windows of policy snap"
	BENCH_FILL_KEYS="$snap_keys" BENCH_FILL_POLICY=snap BENCH_FILL_THREADS=2 \
		wrk -t2 -c16 -d600s --timeout 10s -s "$repo/scripts/bench_fill.lua" "$url" >"$tmp/fill-$k.wrk" 2>&1 &
	wpid=$!
	bench_pid=$wpid
	# Until every window is live, or nothing changed for 10 s.
	local last=-1 still=0
	while [ "$still" -lt 20 ]; do
		"$rl" status --json --addr "$url" >"$tmp/fill-status.json" 2>/dev/null && live="$(jget "$tmp/fill-status.json" .liveWindows)"
		if [ "${live:-0}" -ge "$snap_keys" ]; then break; fi
		kill -0 "$wpid" 2>/dev/null || break
		if [ "${live:-0}" = "$last" ]; then still=$((still + 1)); else still=0; fi
		last=${live:-0}
		sleep 0.5
	done
	kill -INT "$wpid" 2>/dev/null || true
	wait "$wpid" 2>/dev/null || true
	bench_pid=""
	[ "${live:-0}" -ge "$snap_keys" ] || { cat "$tmp/fill-$k.wrk" >&2; die "$k: only ${live:-0} of $snap_keys windows live after the fill"; }
	say "$k: $live windows live"
}

# snapshot_run REP KIND: closed loop at 64 workers over the snap windows
# (rlnode bench, for its per-second trace) while the leader takes a
# snapshot a third of the way in; the snapshot's start and end, in seconds
# from the measured start, go to NAME.snap.
snapshot_run() {
	local r=$1 k=$2 name="r$1-$2-snapshot-64" at spid
	local start
	start="$(python3 -c 'import sys, time; print(time.time() + float(sys.argv[1]))' "$warmup_s")"
	at="$(python3 -c 'import sys; print(float(sys.argv[1]) + float(sys.argv[2]) / 3)' "$warmup_s" "$duration_s")"
	(
		sleep "$at"
		t0="$(date +%s.%N)"
		"$rl" snapshot --addr "${leader_url[$k]}" >"$tmp/$name.snapout" 2>&1
		t1="$(date +%s.%N)"
		python3 -c 'import sys; a, b, w = map(float, sys.argv[1:]); print("%.3f %.3f" % (a - w, b - w))' "$t0" "$t1" "$start" >"$out/$name.snap"
	) &
	spid=$!
	run_keys=$snap_keys run_client=rlnode run "$name" --addr "${leader_url[$k]}" --path "/check/snap/{key}" --concurrency 64
	wait "$spid" || true
	grep -q "taken" "$tmp/$name.snapout" || say "warning: $name: snapshot: $(cat "$tmp/$name.snapout")"
}

if want_run snapshot; then
	if [ "$client" != wrk ]; then
		say "snapshot runs skipped: the fill needs wrk"
	else
		for k in "${kinds[@]}"; do fill "$k"; done
		for r in $(seq 1 "$reps"); do
			for k in "${kinds[@]}"; do snapshot_run "$r" "$k"; done
		done
	fi
fi

for k in "${kinds[@]}"; do
	now=""
	"$rl" status --json --addr "${leader_url[$k]}" >"$tmp/status-after.json" 2>/dev/null && now="$(jget "$tmp/status-after.json" .leaderId)"
	if [ "$now" != "${leader_id[$k]}" ]; then
		say "warning: $k leadership moved during the runs (${leader_id[$k]} -> ${now:-none}); ratios may be off"
		echo "warning: $k leadership moved during the runs (${leader_id[$k]} -> ${now:-none})" >>"$out/env.txt"
	fi
done

# ---- report ----

BENCH_LEASED_CAP="$leased_cap" BENCH_DURATION_S="$duration_s" \
	python3 "$repo/scripts/bench_report.py" "$out" "$reps" "$baseline" "${kinds[@]}" | tee "$out/summary.txt"
misses="$(grep -c ' MISS ' "$out/summary.txt" || true)"
if [ "${BENCH_STRICT:-0}" = 1 ] && [ "$misses" != 0 ]; then
	exit 1
fi
