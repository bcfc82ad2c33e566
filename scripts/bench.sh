#!/usr/bin/env bash
# Cluster benchmark: builds rlnode, starts a local 3-node cluster on
# 127.0.0.1 (free ports, data in a temp dir), drives it with `rlnode bench`,
# and prints throughput, latency and the targets, each PASS or MISS.
#
# Usage: scripts/bench.sh            (from anywhere; builds from this checkout)
#
# Runs (closed loop = N workers back to back; open loop = fixed request rate):
#   livez@64       GET /livez on the leader, 64 workers: the HTTP ceiling of
#                  one node with the same client
#   check@64       GET /check/{key} on the leader, 64 workers
#   check@256      the same, 256 workers
#   followers@64   GET /check/{key} round-robin over the two followers (they
#                  forward to the leader), 64 workers
#   open@half      open loop on the leader at half of check@64's throughput
#
# Targets:
#   check@64 / livez@64 >= 0.5        check@256 >= check@64
#   followers@64 / check@64 >= 0.7    p99 at 64 workers <= 10 ms
#   open-loop p99 at half rate <= 5 ms
#
# Environment:
#   BENCH_DURATION  measured length of each run (default 10s, a Go duration)
#   BENCH_WARMUP    unmeasured warmup before each run (default 1s)
#   BENCH_KEYS      distinct client ids, uniform (default 10000)
#   BENCH_OUT       results dir (default ./bench-out/<timestamp>); gets one
#                   JSON file per run, summary.txt and env.txt
#   BENCH_KEEP=1    keep the temp dir (node logs, data) and copy the node logs
#                   into the results dir
#   BENCH_STRICT=1  exit 1 if any target is missed (default: report only)
#   GO              go command (default: go)
#   BENCH_JSON      force the JSON reader: jq or python3 (default: jq if installed)
#
# Needs bash, go and python3 (jq, when installed, reads the JSON). The client
# and all three nodes share this machine's CPUs, so the numbers compare runs
# on one machine; they are not what one node per host would do.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
go="${GO:-go}"
duration="${BENCH_DURATION:-10s}"
warmup="${BENCH_WARMUP:-1s}"
keys="${BENCH_KEYS:-10000}"
stamp="$(date +%Y%m%d-%H%M%S)"
out="${BENCH_OUT:-./bench-out/$stamp}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

say() { printf 'bench: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

command -v "$go" >/dev/null || die "$go not found in PATH (set GO=/path/to/go)"
json_tool="${BENCH_JSON:-}" # jq or python3; default: jq if installed
if [ -z "$json_tool" ]; then
	if command -v jq >/dev/null; then json_tool=jq; else json_tool=python3; fi
fi
command -v python3 >/dev/null || die "need python3 (free ports, JSON)"
command -v "$json_tool" >/dev/null || die "need $json_tool to read JSON"

# ---- cleanup: stop the nodes we started, remove the temp dir ----

tmp="$(mktemp -d "${TMPDIR:-/tmp}/rlnode-bench.XXXXXX")"
pids=()
bench_pid=""

stop_nodes() {
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
	stop_nodes
	if [ "${BENCH_KEEP:-0}" = 1 ]; then
		cp "$tmp"/n*.log "$out"/ 2>/dev/null || true
		say "kept $tmp (node logs and data); logs also copied to $out"
	else
		rm -rf "$tmp"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT
trap 'say "terminated"; exit 143' TERM

# ---- JSON ----

# jget FILE PATH: prints the value at a dotted PATH (e.g. .latencyMs.p99).
jget() {
	if [ "$json_tool" = jq ]; then
		jq -r "$2 // empty" "$1"
	else
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
	fi
}

# ---- build and start ----

say "building rlnode"
(cd "$repo" && "$go" build -o "$tmp/rlnode" ./cmd/rlnode)
rl="$tmp/rlnode"

# Six free ports from the kernel. There is a small race between closing
# them here and the nodes binding them; a clash shows up as a failed start.
read -r -a ports <<<"$(python3 -c '
import socket
ss = [socket.socket() for _ in range(6)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))
for s in ss: s.close()
')"
http=("${ports[0]}" "${ports[1]}" "${ports[2]}")
raft=("${ports[3]}" "${ports[4]}" "${ports[5]}")
url() { printf 'http://127.0.0.1:%s' "${http[$1]}"; }

start_node() { # index, extra flags...
	local i=$1 id="n$(($1 + 1))"
	shift
	"$rl" serve --id "$id" \
		--http-addr "127.0.0.1:${http[$i]}" --raft-addr "127.0.0.1:${raft[$i]}" \
		--data-dir "$tmp/$id" --limit 1000000000 --window 60s --log-level warn \
		"$@" >"$tmp/$id.log" 2>&1 &
	pids+=("$!")
}

wait_healthy() { # index
	local i=$1
	for _ in $(seq 1 300); do # 30s
		"$rl" health --addr "$(url "$i")" >/dev/null 2>&1 && return 0
		kill -0 "${pids[$i]}" 2>/dev/null || { cat "$tmp/n$((i + 1)).log" >&2; die "n$((i + 1)) exited"; }
		sleep 0.1
	done
	cat "$tmp/n$((i + 1)).log" >&2
	die "n$((i + 1)) not ready at $(url "$i") after 30s"
}

say "starting n1 (bootstrap) on $(url 0)"
start_node 0
wait_healthy 0
for i in 1 2; do
	say "starting n$((i + 1)) on $(url "$i"), joining n1"
	start_node "$i" --join "$(url 0)"
done
wait_healthy 1
wait_healthy 2

# The leader is the node whose own status says so; wait until all three
# agree on it and the configuration has three voters.
leader=""
for _ in $(seq 1 300); do
	ids=()
	leader=""
	for i in 0 1 2; do
		"$rl" status --json --addr "$(url "$i")" >"$tmp/status$i.json" 2>/dev/null || continue
		ids+=("$(jget "$tmp/status$i.json" .leaderId)")
		if [ "$(jget "$tmp/status$i.json" .state)" = Leader ]; then leader=$i; fi
	done
	"$rl" peers --json --addr "$(url 0)" >"$tmp/peers.json" 2>/dev/null || true
	voters="$(python3 -c 'import json,sys; print(sum(1 for p in json.load(open(sys.argv[1])) if p.get("voter")))' "$tmp/peers.json" 2>/dev/null || echo 0)"
	if [ -n "$leader" ] && [ "${#ids[@]}" = 3 ] && [ "$voters" = 3 ] &&
		[ "${ids[0]}" = "${ids[1]}" ] && [ "${ids[1]}" = "${ids[2]}" ] && [ -n "${ids[0]}" ]; then
		break
	fi
	leader=""
	sleep 0.1
done
[ -n "$leader" ] || die "no agreed leader with 3 voters after 30s"
followers=()
for i in 0 1 2; do
	if [ "$i" != "$leader" ]; then followers+=("$i"); fi
done
leader_id="$(jget "$tmp/status$leader.json" .id)"
say "leader n$((leader + 1)) ($(url "$leader")), followers n$((followers[0] + 1)) n$((followers[1] + 1))"

{
	echo "date:       $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "rev:        $(cd "$repo" && git rev-parse --short HEAD 2>/dev/null || echo unknown)$(cd "$repo" && git diff --quiet HEAD 2>/dev/null || echo -dirty)"
	echo "go:         $("$go" version)"
	echo "cpus:       $(getconf _NPROCESSORS_ONLN 2>/dev/null || echo '?')"
	echo "loadavg:    $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')"
	echo "runs:       duration $duration, warmup $warmup, keys $keys uniform"
	echo "leader:     $leader_id $(url "$leader")"
	echo "followers:  $(url "${followers[0]}") $(url "${followers[1]}")"
} >"$out/env.txt"

# ---- runs ----

# run NAME ARGS...: one `rlnode bench --json` run into $out/NAME.json.
run() {
	local name=$1
	shift
	say "run $name: rlnode bench $*"
	"$rl" bench --json --duration "$duration" --warmup "$warmup" --keys "$keys" "$@" \
		>"$out/$name.json" 2>"$tmp/$name.err" &
	bench_pid=$!
	if ! wait "$bench_pid"; then
		bench_pid=""
		cat "$tmp/$name.err" >&2
		die "run $name failed"
	fi
	bench_pid=""
}

L="$(url "$leader")"
F="$(url "${followers[0]}"),$(url "${followers[1]}")"
run livez-64 --addr "$L" --path /livez --concurrency 64
run check-64 --addr "$L" --concurrency 64
run check-256 --addr "$L" --concurrency 256
run followers-64 --addr "$F" --concurrency 64
half="$(awk -v t="$(jget "$out/check-64.json" .throughputRps)" 'BEGIN { r = t / 2; if (r < 1) r = 1; printf "%.0f", r }')"
run open-half --addr "$L" --rate "$half"

now_leader=""
"$rl" status --json --addr "$L" >"$tmp/status-after.json" 2>/dev/null && now_leader="$(jget "$tmp/status-after.json" .leaderId)"
[ "$now_leader" = "$leader_id" ] || say "warning: leadership moved during the runs ($leader_id -> ${now_leader:-none}); ratios may be off"

# ---- report ----

tp() { jget "$out/$1.json" .throughputRps; }
p50() { jget "$out/$1.json" .latencyMs.p50; }
p99() { jget "$out/$1.json" .latencyMs.p99; }
errs() { jget "$out/$1.json" .errors; }

misses=0
{
	cat "$out/env.txt"
	echo
	printf '%-14s %-26s %12s %9s %9s %8s\n' run workload req/s p50_ms p99_ms errors
	for r in livez-64:"/livez leader, 64 workers" check-64:"/check leader, 64 workers" \
		check-256:"/check leader, 256 workers" followers-64:"/check followers, 64 wkrs" \
		open-half:"/check leader, open ${half}/s"; do
		name=${r%%:*}
		printf '%-14s %-26s %12.0f %9.3f %9.3f %8s\n' "$name" "${r#*:}" "$(tp "$name")" "$(p50 "$name")" "$(p99 "$name")" "$(errs "$name")"
	done
	dropped="$(jget "$out/open-half.json" .dropped)"
	[ "${dropped:-0}" = 0 ] || echo "note: the open-loop run dropped $dropped requests (all in-flight slots busy)"
	echo
	printf '%-32s %10s %10s  %-6s %s\n' target value goal result margin
	# check NAME VALUE OP GOAL UNIT: one target row; OP is >= or <=.
	check() {
		local name=$1 value=$2 op=$3 goal=$4 unit=$5
		awk -v n="$name" -v v="$value" -v op="$op" -v g="$goal" -v u="$unit" 'BEGIN {
			ok = (op == ">=") ? (v >= g) : (v <= g)
			if (g == 0) m = ""
			else if (ok) m = sprintf("%.1f%% headroom", (op == ">=" ? (v - g) / g : (g - v) / g) * 100)
			else if (op == ">=") m = sprintf("%.1f%% short", (g - v) / g * 100)
			else m = sprintf("%.1fx the limit", v / g)
			printf "%-32s %10.3f %10s  %-6s %s\n", n, v, op " " g u, ok ? "PASS" : "MISS", m
			exit ok ? 0 : 1
		}' || misses=$((misses + 1))
	}
	check "check@64 / livez@64" "$(awk -v a="$(tp check-64)" -v b="$(tp livez-64)" 'BEGIN{print (b > 0 ? a / b : 0)}')" ">=" 0.5 ""
	check "check@256 / check@64" "$(awk -v a="$(tp check-256)" -v b="$(tp check-64)" 'BEGIN{print (b > 0 ? a / b : 0)}')" ">=" 1 ""
	check "followers@64 / check@64" "$(awk -v a="$(tp followers-64)" -v b="$(tp check-64)" 'BEGIN{print (b > 0 ? a / b : 0)}')" ">=" 0.7 ""
	check "p99 check@64 leader (ms)" "$(p99 check-64)" "<=" 10 ms
	check "p99 check@64 followers (ms)" "$(p99 followers-64)" "<=" 10 ms
	check "p99 open loop @ half rate (ms)" "$(p99 open-half)" "<=" 5 ms
	echo
	echo "results: $out"
	[ "$misses" = 0 ] && echo "all targets met" || echo "$misses target(s) missed"
} | tee "$out/summary.txt"
misses="$(grep -c ' MISS ' "$out/summary.txt" || true)"
for name in livez-64 check-64 check-256 followers-64 open-half; do
	e="$(errs "$name")"
	[ "${e:-0}" = 0 ] || say "warning: $name had $e errors: $(jget "$out/$name.json" .errorKinds)"
done
if [ "${BENCH_STRICT:-0}" = 1 ] && [ "$misses" != 0 ]; then
	exit 1
fi
