#!/usr/bin/env python3
"""Report of scripts/bench.sh: medians over interleaved repetitions, the
worst repetition's p99, ratios against the Redis baseline, and the targets.

Usage: bench_report.py OUT_DIR REPS BASELINE(0|1) KIND...
Reads OUT_DIR/r<rep>-<name>.json (rlnode bench --json) and OUT_DIR/env.txt.
"""
import json
import os
import statistics
import sys


def load(out, reps, name):
    runs = []
    for r in range(1, reps + 1):
        p = os.path.join(out, "r%d-%s.json" % (r, name))
        if os.path.exists(p):
            with open(p) as f:
                runs.append(json.load(f))
    return runs


def med(runs, key, sub=None):
    vals = [(r[key][sub] if sub else r[key]) for r in runs]
    return statistics.median(vals) if vals else float("nan")


def worst(runs, sub):
    vals = [r["latencyMs"][sub] for r in runs]
    return max(vals) if vals else float("nan")


def worst_second(runs):
    """The slowest second of any repetition: (p99, max, rep) or None."""
    best = None
    for i, r in enumerate(runs):
        for s in r.get("trace") or []:
            if best is None or s["maxMs"] > best[1]:
                best = (s["p99Ms"], s["maxMs"], i + 1, s["second"])
    return best


def snapshot_seconds(out, kinds, runs):
    """For each snapshot run: when the leader's snapshot ran and the p99/max
    of the trace seconds it overlapped."""
    lines = []
    for k in kinds:
        n = "%s-snapshot-64" % k
        for i, r in enumerate(runs.get(n) or []):
            p = os.path.join(out, "r%d-%s.snap" % (i + 1, n))
            if not os.path.exists(p):
                continue
            with open(p) as f:
                start, end = (float(x) for x in f.read().split())
            secs = [s for s in r.get("trace") or [] if s["second"] > start and s["second"] - 1 < end]
            during = "no trace second overlaps it" if not secs else "its seconds %s: p99 %s ms, max %s ms" % (
                ",".join(str(s["second"]) for s in secs),
                "/".join("%.1f" % s["p99Ms"] for s in secs), "/".join("%.1f" % s["maxMs"] for s in secs))
            lines.append("  %s rep %d: snapshot from %.1f s to %.1f s (%.0f ms); %s; whole run p99 %.1f ms" % (
                k, i + 1, start, end, (end - start) * 1000, during, r["latencyMs"]["p99"]))
    if lines:
        print()
        print("snapshots under load (seconds from the measured start):")
        for l in lines:
            print(l)


def fastpath_targets(k, runs, tp, ratio, target, baseline):
    """Issue 28's Targets: leased hot keys against /livez and Redis at 64
    and 256 workers, strict hot keys against Redis on the same keys, the
    followers against the leader, and strict Zipf keys' p99 in every run."""
    if not runs.get("%s-hot-check-256" % k):
        return
    # leased@64 / livez@64 is among the leased targets
    target("%s leased@256 / livez@256" % k, ratio(tp("%s-leased-256" % k), tp("livez-256")), ">=", 0.8)
    for c in (64, 256):
        if baseline:
            target("%s leased@%d / redis hot@%d" % (k, c, c), ratio(tp("%s-leased-%d" % (k, c)), tp("redis-hot-%d" % c)), ">=", 2.0)
            target("%s strict hot@%d / redis hot@%d" % (k, c, c), ratio(tp("%s-hot-check-%d" % (k, c)), tp("redis-hot-%d" % c)), ">=", 1.0)
    target("%s p99 strict hot@64, worst rep (ms)" % k, worst(runs.get("%s-hot-check-64" % k, []), "p99"), "<=", 10, "ms")
    target("%s strict hot followers / leader @64" % k, ratio(tp("%s-hot-followers-64" % k), tp("%s-hot-check-64" % k)), ">=", 0.9)
    target("%s p99 strict zipf@256, worst rep (ms)" % k, worst(runs.get("%s-zipf-strict-256" % k, []), "p99"), "<=", 60, "ms")


RLS_RUNS = ("leased-hot", "leased-zipf", "strict-hot", "strict-zipf")


def rls_targets(k, tp, ratio, target):
    """Issue 40's Targets: ShouldRateLimit through a follower against
    envoyproxy/ratelimit + Redis on the same YAML and load."""
    for n in RLS_RUNS:
        goal = 1.5 if n.startswith("leased") else 0.9
        target("%s rls %s / envoyrl" % (k, n), ratio(tp("%s-rls-%s" % (k, n)), tp("envoyrl-rls-%s" % n)), ">=", goal)


def main():
    out, reps, baseline, kinds = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4:]
    with open(os.path.join(out, "env.txt")) as f:
        print(f.read().rstrip())
    print()
    names = ["livez-64"]
    for c in (64, 256):
        names += ["%s-check-%d" % (k, c) for k in kinds]
        if baseline:
            names.append("redis-check-%d" % c)
    # issue 28's fast-path runs (BENCH_RUNS has fastpath)
    names.append("livez-256")
    if baseline:
        names += ["redis-hot-64", "redis-hot-256"]
    for k in kinds:
        names += ["%s-%s" % (k, n) for n in ("hot-check-256", "hot-followers-64", "zipf-strict-256")]
    names += ["%s-followers-64" % k for k in kinds]
    names += ["%s-open-half" % k for k in kinds]
    names += ["%s-snapshot-64" % k for k in kinds]
    for k in kinds:
        names += ["%s-%s" % (k, n) for n in ("hot-check-64", "leased-64", "leased-256", "leased-followers-64",
                                             "leased-all-64", "leased-cap-64")]
    if baseline:
        names += ["redis-zipf-64", "redis-zipf-256"]
    for k in kinds:
        names += ["%s-%s" % (k, n) for n in ("zipf-leased-64", "zipf-leased-256", "zipf-leased-followers-64")]
    # issue 40's Envoy comparison (BENCH_RUNS has rls)
    for k in kinds + ["envoyrl"]:
        names += ["%s-rls-%s" % (k, n) for n in RLS_RUNS]

    print("medians of %d interleaved repetitions; p99 worst = the worst repetition's p99" % reps)
    print("%-26s %10s %8s %8s %10s %9s %9s %8s %s" % (
        "run", "req/s", "p50_ms", "p99_ms", "p99_worst", "p99.9_ms", "max_ms", "errors", "slowest second (p99/max ms)"))
    runs = {}
    for n in names:
        rs = load(out, reps, n)
        runs[n] = rs
        if not rs:
            continue
        ws = worst_second(rs)
        wtxt = "" if ws is None else "%.1f / %.1f (rep %d, s %d)" % ws
        print("%-26s %10.0f %8.3f %8.3f %10.3f %9.3f %9.1f %8d %s" % (
            n, med(rs, "throughputRps"), med(rs, "latencyMs", "p50"), med(rs, "latencyMs", "p99"),
            worst(rs, "p99"), med(rs, "latencyMs", "p999"), worst(rs, "max"),
            sum(r["errors"] for r in rs), wtxt))
    for n, rs in runs.items():
        for i, r in enumerate(rs):
            if r["errors"]:
                print("note: %s rep %d had %d errors: %s" % (n, i + 1, r["errors"], r["errorKinds"]))
            if r.get("dropped"):
                print("note: %s rep %d dropped %d requests (all in-flight slots busy)" % (n, i + 1, r["dropped"]))

    snapshot_seconds(out, kinds, runs)

    def tp(n):
        return med(runs[n], "throughputRps") if runs.get(n) else float("nan")

    def ratio(a, b):
        return a / b if b and b == b else float("nan")

    order = [n for n in names if (n.endswith("-check-64") or n.endswith("-check-256") or "-leased-" in n or "-zipf-" in n
                                  or "-rls-" in n) and runs[n]]
    if order:
        print()
        print("per repetition, req/s (interleaved in this order):")
        print("  %-26s %s" % ("", " ".join("%9s" % ("rep%d" % (i + 1)) for i in range(reps))))
    for n in order:
        print("  %-26s %s" % (n, " ".join("%9.0f" % r["throughputRps"] for r in runs[n])))

    print()
    print("CPU-seconds per 100k requests (median over repetitions; the servers' user+system CPU during the run)")
    print("  %-26s %10s %14s %14s %10s" % ("run", "leader", "each follower", "redis+limiter", "all nodes"))
    print("  (envoyrl runs: envoyproxy/ratelimit + its redis-server in the redis+limiter column)")
    for n in names:
        if n.startswith("livez-"):
            continue
        per = {"leader": [], "follower": [], "redis": [], "all": []}
        for r in range(1, reps + 1):
            p = os.path.join(out, "r%d-%s.cpu" % (r, n))
            js = os.path.join(out, "r%d-%s.json" % (r, n))
            if not (os.path.exists(p) and os.path.exists(js)):
                continue
            with open(js) as f:
                req = json.load(f)["requests"]
            if req == 0:
                continue
            cpu = {}
            with open(p) as f:
                for line in f:
                    label, sec = line.split()
                    cpu[label] = float(sec)
            kind = n.split("-")[0]
            scale = 1e5 / req
            if kind == "redis":
                per["redis"].append((cpu.get("redis-server", 0) + cpu.get("redislimiter", 0)) * scale)
                continue
            if kind == "envoyrl":
                per["redis"].append((cpu.get("envoyrl", 0) + cpu.get("envoyrl-redis", 0)) * scale)
                continue
            per["leader"].append(cpu.get(kind + "-leader", 0) * scale)
            fs = [v for k, v in cpu.items() if k.startswith(kind + "-follower")]
            if fs:
                per["follower"].append(sum(fs) / len(fs) * scale)
            per["all"].append((cpu.get(kind + "-leader", 0) + sum(fs)) * scale)
        if not any(per.values()):
            continue
        cells = ["%10s" % ("%.2f" % statistics.median(per["leader"]) if per["leader"] else "-"),
                 "%14s" % ("%.2f" % statistics.median(per["follower"]) if per["follower"] else "-"),
                 "%14s" % ("%.2f" % statistics.median(per["redis"]) if per["redis"] else "-"),
                 "%10s" % ("%.2f" % statistics.median(per["all"]) if per["all"] else "-")]
        print("  %-26s %s" % (n, " ".join(cells)))

    rows = []

    def target(name, value, op, goal, unit=""):
        ok = value >= goal if op == ">=" else value <= goal
        if value != value:
            return  # that run was not made
        if ok:
            margin = "%.1f%% headroom" % ((value - goal) / goal * 100 if op == ">=" else (goal - value) / goal * 100)
        elif op == ">=":
            margin = "%.1f%% short" % ((goal - value) / goal * 100)
        else:
            margin = "%.1fx the limit" % (value / goal)
        rows.append("%-40s %10.3f %10s  %-6s %s" % (name, value, "%s %g%s" % (op, goal, unit), "PASS" if ok else "MISS", margin))

    for k in kinds:
        if baseline:
            target("%s check@256 / redis@256" % k, ratio(tp("%s-check-256" % k), tp("redis-check-256")), ">=", 1.0)
            target("%s check@64 / redis@64" % k, ratio(tp("%s-check-64" % k), tp("redis-check-64")), ">=", 0.75)
        target("%s check@256 / check@64" % k, ratio(tp("%s-check-256" % k), tp("%s-check-64" % k)), ">=", 1.0)
        target("%s followers@64 / check@64" % k, ratio(tp("%s-followers-64" % k), tp("%s-check-64" % k)), ">=", 0.8)
        target("%s p99 check@64, worst rep (ms)" % k, worst(runs.get("%s-check-64" % k, []), "p99"), "<=", 10, "ms")
        target("%s p99 check@256, worst rep (ms)" % k, worst(runs.get("%s-check-256" % k, []), "p99"), "<=", 20, "ms")
        target("%s p99 open loop @ half rate (ms)" % k, med(runs.get("%s-open-half" % k, []), "latencyMs", "p99"), "<=", 5, "ms")
        target("%s p99 through a snapshot, worst rep (ms)" % k, worst(runs.get("%s-snapshot-64" % k, []), "p99"), "<=", 20, "ms")
        if runs.get("%s-zipf-leased-64" % k):
            for c in (64, 256):
                if baseline:
                    target("%s zipf leased@%d / redis@%d" % (k, c, c), ratio(tp("%s-zipf-leased-%d" % (k, c)), tp("redis-zipf-%d" % c)), ">=", 1.5)
            target("%s zipf leased followers / leader @64" % k, ratio(tp("%s-zipf-leased-followers-64" % k), tp("%s-zipf-leased-64" % k)), ">=", 0.9)
        if runs.get("%s-leased-64" % k):
            lz = tp("livez-64")
            for c in (64, 256):
                if baseline:
                    target("%s leased@%d / redis@%d" % (k, c, c), ratio(tp("%s-leased-%d" % (k, c)), tp("redis-check-%d" % c)), ">=", 2.0)
            target("%s leased@64 / livez@64" % k, ratio(tp("%s-leased-64" % k), lz), ">=", 0.8)
            target("%s leased p99@64 / livez p99@64" % k, ratio(med(runs["%s-leased-64" % k], "latencyMs", "p99"),
                                                              med(runs.get("livez-64", []), "latencyMs", "p99")), "<=", 1.5)
            target("%s leased followers / leader @64" % k, ratio(tp("%s-leased-followers-64" % k), tp("%s-leased-64" % k)), ">=", 0.9)
            target("%s leased all nodes / leader @64" % k, ratio(tp("%s-leased-all-64" % k), tp("%s-leased-64" % k)), ">=", 1.0)
            cap = runs.get("%s-leased-cap-64" % k) or []
            if cap:
                # ok = answers 200 (wrk counts 429 as status errors): the
                # admitted share of 4 keys × cap per second × the run.
                want = 4 * float(os.environ.get("BENCH_LEASED_CAP", "2000")) * float(os.environ.get("BENCH_DURATION_S", "10"))
                target("%s leased admitted share of the limit" % k, statistics.median(r["ok"] / want for r in cap), ">=", 0.9)
        fastpath_targets(k, runs, tp, ratio, target, baseline)
        rls_targets(k, tp, ratio, target)
    print()
    print("%-40s %10s %10s  %-6s %s" % ("target", "value", "goal", "result", "margin"))
    for r in rows:
        print(r)
    if len(kinds) > 1:
        print()
        a, b = kinds[0], kinds[1]
        for c in (64, 256):
            pairs = list(zip(runs.get("%s-check-%d" % (a, c), []), runs.get("%s-check-%d" % (b, c), [])))
            wins = sum(1 for x, y in pairs if x["throughputRps"] > y["throughputRps"])
            print("%s / %s at %d workers: %.2fx req/s (median); %s faster in %d of %d repetitions" % (
                a, b, c, ratio(tp("%s-check-%d" % (a, c)), tp("%s-check-%d" % (b, c))), a, wins, len(pairs)))
    print()
    print("results: %s" % out)
    misses = sum(1 for r in rows if " MISS " in r)
    print("all targets met" if misses == 0 else "%d target(s) missed" % misses)


if __name__ == "__main__":
    main()
