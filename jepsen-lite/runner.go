package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rlnode/rlnode/jepsen-lite/checker"
)

// runner is one run: it owns the network, the cluster, the workload and
// the report, and tears all of it down before returning.
type runner struct {
	o      *options
	t0     time.Time
	log    *logger
	rng    *rand.Rand
	stdout io.Writer

	mode       string
	partitions string // summary.json "partitions"
	method     string
	net        *network
	cl         *cluster
	adm        *admin
	pols       *policySet // nil without --policies
	sum        summary
}

func (r *runner) run(ctx context.Context) int {
	o := r.o
	r.sum = summary{Failures: []string{}, Warnings: []string{}, Faults: []faultRecord{}, Crashes: []crash{},
		Violations: []checker.Violation{}, Files: map[string]any{}}
	// Node data dirs live under the report dir: reusing one would restart
	// nodes on an earlier run's Raft state (with that run's addresses).
	for _, leftover := range []string{"data", "summary.json"} {
		if _, err := os.Stat(filepath.Join(o.out, leftover)); err == nil {
			fmt.Fprintf(r.stdout, "jepsen-lite: --out %s already holds a run (%s); choose a new directory or remove it\n", o.out, leftover)
			return exitUsage
		}
	}
	if err := os.MkdirAll(logDir(o.out), 0o755); err != nil {
		fmt.Fprintf(r.stdout, "jepsen-lite: INVALID aborted: create out dir: %v\n", err)
		return exitAborted
	}
	logFile, err := os.Create(filepath.Join(o.out, "jepsen-lite.log"))
	if err == nil {
		defer logFile.Close()
		r.log.setOutput(io.MultiWriter(r.stdout, logFile))
	}
	r.log.Printf("jepsen-lite run %q: %d nodes, %d clients, %d keys, limit %d per %s, policies %v, out %s, seed %d",
		o.name, o.nodes, o.clients, o.keys, o.limit, o.window, o.policies, o.out, o.seed)

	code, line, err := r.execute(ctx)
	if err != nil && ctx.Err() != nil {
		err = errors.New("interrupted by SIGINT/SIGTERM")
	}
	if err != nil {
		r.sum.Valid = false
		r.sum.Verdict = "INVALID"
		r.sum.Failures = append(r.sum.Failures, "run aborted: "+err.Error())
		r.writeSummary()
		r.log.Printf("see %s", o.out)
		r.verdict(fmt.Sprintf("jepsen-lite: INVALID aborted: %v (out: %s)", err, o.out))
		return exitAborted
	}
	r.verdict(line)
	return code
}

// verdict prints the final line; run calls it after execute's deferred
// cleanup, so it really is the last line.
func (r *runner) verdict(line string) {
	r.log.setOutput(io.Discard)
	fmt.Fprintln(r.stdout, line)
	if f, err := os.OpenFile(filepath.Join(r.o.out, "jepsen-lite.log"), os.O_APPEND|os.O_WRONLY, 0); err == nil {
		fmt.Fprintln(f, line)
		f.Close()
	}
}

// execute does the whole run. Cleanup (processes, then network) is
// deferred here, so it happens on success, error and Ctrl-C alike.
func (r *runner) execute(ctx context.Context) (code int, verdict string, err error) {
	o := r.o
	bin, err := r.binary(ctx)
	if err != nil {
		return 0, "", err
	}

	r.setupNetwork(ctx)
	if r.net != nil {
		defer r.net.teardown()
	}
	if ctx.Err() != nil {
		return 0, "", ctx.Err()
	}

	specs, err := r.nodeSpecs()
	if err != nil {
		return 0, "", err
	}
	sec, secFlags, err := setupSecurity(ctx, bin, o.out, specs, o.insecure)
	if err != nil {
		return 0, "", err
	}
	r.log.Printf("security: %s", sec.describe())
	common := []string{"--limit", fmt.Sprint(o.limit), "--window", o.window.String()}
	common = append(common, nodeFixedFlags...)
	common = append(common, secFlags...)
	common = append(common, strings.Fields(o.serveArgs)...)
	r.cl = newCluster(bin, specs, common, r.log, r.t0)
	defer r.cl.killAll()
	r.adm = newAdmin(sec)
	defer r.adm.close()

	if err := r.startCluster(ctx); err != nil {
		return 0, "", err
	}

	// Policies, then the workload.
	var algorithms, policyNames []string
	if o.policies {
		r.pols = newPolicySet(o.limit, o.window)
		var urls []string
		for _, s := range specs {
			urls = append(urls, s.url())
		}
		if err := r.pols.create(ctx, r.adm, urls); err != nil {
			return 0, "", fmt.Errorf("create the run's policies (does this rlnode have PUT /v1/policies? --policies=false runs without): %w", err)
		}
		r.log.Printf("policies created: %s", r.pols.describe())
		policyNames, algorithms = r.pols.names(), r.pols.algorithms()
	}
	ts, pairs := targets(o.keys, policyNames, algorithms)
	var keys []string
	for _, t := range ts {
		keys = append(keys, t.key)
	}
	wl := newWorkload(workloadConfig{t0: r.t0, nodes: specs, targets: ts, pairs: pairs, tls: sec.client, clients: o.clients, rate: o.rate,
		peekRatio: o.peekRatio, multiRatio: o.multiRatio, timeout: o.timeout, seed: o.seed})
	wl.start(ctx)
	defer wl.stop()
	r.log.Printf("workload started: %d clients, ~%.0f ops/s, %.0f%% peeks, %.0f%% multi-key checks over %d pairs, keys %v",
		o.clients, o.rate, o.peekRatio*100, o.multiRatio*100, len(pairs), keys)

	// Nemesis.
	list := o.nemeses
	skipped := map[string]string{}
	for _, n := range o.skipped {
		skipped[n] = "needs --nodes 5"
		if n == nemRaiseLimit {
			skipped[n] = "needs --policies"
		}
	}
	if r.net == nil {
		var kept []string
		for _, n := range list {
			if isPartition(n) {
				skipped[n] = strings.TrimPrefix(r.partitions, "skipped: ")
			} else {
				kept = append(kept, n)
			}
		}
		list = kept
		r.sum.Warnings = append(r.sum.Warnings, "network partitions NOT tested: "+strings.TrimPrefix(r.partitions, "skipped: "))
	}
	r.sum.NemesesRequested = o.nemeses
	if len(skipped) > 0 {
		r.sum.NemesesSkipped = skipped
	}
	duration, extended := effectiveDuration(list, o.duration, o.faultDuration, o.quiet)
	if extended {
		note := fmt.Sprintf("--duration %s is too short for one round of %d nemeses (%s each + heal + %s quiet): extended to %s",
			o.duration, len(list), o.faultDuration, o.quiet, duration)
		r.log.Loudf("%s", note)
		r.sum.Run.DurationNote = note
		r.sum.Warnings = append(r.sum.Warnings, note)
	}
	plan := buildPlan(list, duration, o.faultDuration, o.quiet, r.rng)
	r.log.Printf("warm-up: %s of ops without faults", o.quiet)
	if err := sleepCtx(ctx, o.quiet); err != nil {
		return 0, "", err
	}
	phaseStart := time.Now()
	r.log.Printf("faulted phase: %s, nemeses %v", duration, list)
	nm := &nemesis{cl: r.cl, net: r.net, adm: r.adm, rng: r.rng, log: r.log, t0: r.t0,
		fault: o.faultDuration, quiet: o.quiet, skew: o.skew, pols: r.pols}
	faults, err := nm.run(ctx, plan, len(list), phaseStart, duration)
	r.sum.Faults = append(r.sum.Faults, faults...)
	if err != nil {
		return 0, "", err
	}
	r.sum.Run.Duration = time.Since(phaseStart).Round(time.Millisecond).String()

	// Heal, settle, final quiet phase.
	r.log.Printf("faulted phase over after %s (%d faults); healing everything", time.Since(phaseStart).Round(time.Second), len(faults))
	if err := nm.healAll(ctx); err != nil {
		r.sum.Warnings = append(r.sum.Warnings, "heal-all: "+err.Error())
		r.log.Loudf("heal-all: %v", err)
	}
	if err := waitSettled(ctx, r.cl, r.adm, 30*time.Second); err != nil {
		if ctx.Err() != nil {
			return 0, "", ctx.Err()
		}
		r.sum.Warnings = append(r.sum.Warnings, "settle: "+err.Error())
		r.log.Loudf("%v", err)
	} else {
		r.log.Printf("cluster settled")
	}
	finalStart := time.Since(r.t0).Seconds()
	r.log.Printf("final quiet phase: %s", o.final)
	if err := sleepCtx(ctx, o.final); err != nil {
		return 0, "", err
	}
	history := wl.stop()
	finalEnd := time.Since(r.t0).Seconds()
	r.sum.Run.FinalPhase = [2]float64{finalStart, finalEnd}
	r.log.Printf("workload stopped: %d records", len(history))

	// Convergence, while the nodes still run.
	conv := checkConvergence(ctx, r.cl, r.adm, 20*time.Second)
	r.sum.Convergence = conv
	if conv.OK {
		r.log.Printf("convergence: OK (%s)", conv.Detail)
	} else {
		r.log.Loudf("convergence FAILED: %s %v", conv.Detail, conv.Divergent)
	}
	if err := r.cl.stopAll(10 * time.Second); err != nil {
		r.log.Printf("stopping nodes: %v", err)
	}
	r.log.Printf("nodes stopped")

	code, verdict = r.judge(history, faults, finalStart, finalEnd)
	return code, verdict, nil
}

// binary builds rlnode (or takes --binary).
func (r *runner) binary(ctx context.Context) (string, error) {
	if r.o.binary != "" {
		abs, err := filepath.Abs(r.o.binary)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(abs); err != nil {
			return "", fmt.Errorf("--binary: %w", err)
		}
		return abs, nil
	}
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/rlnode/rlnode").Output()
	if err != nil {
		return "", fmt.Errorf("find the rlnode module (run from inside the repository): %w", err)
	}
	root := strings.TrimSpace(string(out))
	bin := filepath.Join(r.o.out, "bin", "rlnode")
	r.log.Printf("building rlnode: go build -o %s ./cmd/rlnode (in %s)", bin, root)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/rlnode")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build rlnode: %w\n%s", err, b)
	}
	return bin, nil
}

// setupNetwork creates the namespaces or, failing that, falls back to
// loopback and says so as loudly as it can.
func (r *runner) setupNetwork(ctx context.Context) {
	reason := ""
	switch {
	case r.o.loopback:
		reason = "--loopback given"
	default:
		reason = netnsUnavailable()
	}
	if reason == "" {
		if reaped := reapStaleRuns(5, r.log); len(reaped) > 0 {
			r.log.Printf("reaped leftovers of dead runs %v", reaped)
		}
		n, err := setupNetwork(ctx, r.o.name, r.o.nodes, r.log)
		if err != nil {
			reason = "network namespace setup failed: " + err.Error()
		} else {
			r.net = n
		}
	}
	if r.net != nil {
		r.mode = "netns"
		r.method = "iptables DROP rules (INPUT -s peer, OUTPUT -d peer) in each node's namespace, chain " + chainName
		r.partitions = "run"
		r.log.Printf("network: bridge %s %s.0/24 (runner at %s), namespaces %v, node IPs %v",
			r.net.names.bridge, r.net.prefix, r.net.hostIP, r.net.names.ns, r.net.nodeIPs)
		return
	}
	r.mode = "loopback"
	r.partitions = "skipped: " + reason
	for range 3 {
		r.log.Loudf("NO NETWORK NAMESPACES (%s): running on loopback, NETWORK PARTITIONS ARE NOT TESTED", reason)
	}
}

// nodeSpecs lays out addresses, data dirs and logs.
func (r *runner) nodeSpecs() ([]nodeSpec, error) {
	var specs []nodeSpec
	for i := range r.o.nodes {
		id := fmt.Sprintf("n%d", i+1)
		s := nodeSpec{idx: i, id: id,
			dataDir: filepath.Join(r.o.out, "data", id),
			logPath: filepath.Join(logDir(r.o.out), id+".log")}
		if r.net != nil {
			s.ns = r.net.names.ns[i]
			s.httpAddr = net.JoinHostPort(r.net.nodeIPs[i], "8080")
			s.raftAddr = net.JoinHostPort(r.net.nodeIPs[i], "8300")
		} else {
			hp, err := freePort()
			if err != nil {
				return nil, err
			}
			rp, err := freePort()
			if err != nil {
				return nil, err
			}
			s.httpAddr = net.JoinHostPort("127.0.0.1", fmt.Sprint(hp))
			s.raftAddr = net.JoinHostPort("127.0.0.1", fmt.Sprint(rp))
		}
		specs = append(specs, s)
	}
	return specs, nil
}

// freePort asks the kernel for an unused loopback port. Another process
// could take it before the node binds; a node that fails to bind shows up
// as a crash with the reason in its log.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startCluster bootstraps n1 and joins the others one at a time (Raft
// takes one membership change at a time anyway), then waits for a settled
// cluster.
func (r *runner) startCluster(ctx context.Context) error {
	specs := r.cl.specs
	if err := r.cl.start(0); err != nil {
		return err
	}
	if err := r.waitReady(ctx, 0, 20*time.Second); err != nil {
		return err
	}
	for i := 1; i < len(specs); i++ {
		r.cl.setJoin(i, []string{specs[0].url()})
		if err := r.cl.start(i); err != nil {
			return err
		}
		if err := r.waitReady(ctx, i, 30*time.Second); err != nil {
			return err
		}
	}
	if err := waitSettled(ctx, r.cl, r.adm, 30*time.Second); err != nil {
		return err
	}
	r.log.Printf("cluster of %d up: %v", len(specs), r.cl.names())
	return nil
}

func (r *runner) waitReady(ctx context.Context, i int, timeout time.Duration) error {
	s := r.cl.specs[i]
	err := retry(ctx, timeout, func() error {
		if !r.cl.running(i) {
			return retryStop(fmt.Errorf("%s exited during startup (see %s)", s.id, s.logPath))
		}
		return r.adm.ready(ctx, s.url())
	})
	if err != nil {
		return fmt.Errorf("%s not ready: %w", s.id, err)
	}
	return nil
}

// judge runs the checker, writes the report and returns the exit code and
// the verdict line.
func (r *runner) judge(history []opRecord, faults []faultRecord, finalStart, finalEnd float64) (int, string) {
	o := r.o
	cfg := checker.Config{Limit: o.limit, WindowMs: o.window.Milliseconds(), Timeout: o.checkTimeout}
	if r.pols != nil {
		cfg.Policies = r.pols.checkerPolicies()
		r.sum.Policies = cfg.Policies
	}
	hist := checkerHistory(history)
	r.log.Printf("checking %d ops (%d failed ops left out)...", len(hist), len(history)-len(hist))
	t := time.Now()
	res := checker.Check(cfg, hist)
	r.log.Printf("checker done in %s: valid=%v, %d violations", time.Since(t).Round(time.Millisecond), res.Valid, len(res.Violations))
	r.sum.Checker = checkerSummary{Valid: res.Valid, Keys: res.Keys, Counts: res.Counts}
	r.sum.Violations = res.Violations
	if !res.Valid {
		paths, err := checker.WriteVisualizations(cfg, hist, o.out)
		if err != nil {
			r.sum.Warnings = append(r.sum.Warnings, "visualizations: "+err.Error())
		}
		for i := range paths {
			paths[i] = filepath.Base(paths[i])
		}
		r.sum.Files["visualizations"] = paths
		for _, v := range res.Violations {
			r.log.Loudf("violation %s key %s: %s ops %v", v.Check, v.Key, v.Detail, firstN(v.OpIDs, 20))
		}
	}

	r.sum.Counts = countOps(history)
	r.sum.Availability = computeAvailability(history, faults, finalStart, finalEnd)
	r.sum.Crashes = append(r.sum.Crashes, r.cl.crashList()...)

	// Failures: anything that makes the run INVALID.
	if !res.Valid {
		r.sum.Failures = append(r.sum.Failures, fmt.Sprintf("checker: %d violation(s)", len(res.Violations)))
	}
	if !r.sum.Convergence.OK {
		r.sum.Failures = append(r.sum.Failures, "convergence: "+r.sum.Convergence.Detail)
	}
	for _, c := range r.sum.Crashes {
		r.sum.Failures = append(r.sum.Failures, fmt.Sprintf("node %s exited on its own at +%.1fs: %s", c.Node, c.At, c.Error))
	}
	ranClean := map[string]bool{}
	for _, f := range faults {
		if f.Error == "" {
			ranClean[f.Name] = true
		} else {
			r.sum.Warnings = append(r.sum.Warnings, fmt.Sprintf("fault %s at +%.1fs: %s", f.Name, f.Start, f.Error))
		}
	}
	for _, n := range o.nemeses {
		if _, skipped := r.sum.NemesesSkipped[n]; !skipped && !ranClean[n] {
			r.sum.Failures = append(r.sum.Failures, "nemesis "+n+" never ran without error")
		}
	}
	r.sum.Valid = len(r.sum.Failures) == 0
	r.sum.Verdict = map[bool]string{true: "VALID", false: "INVALID"}[r.sum.Valid]

	if err := writeHistory(filepath.Join(o.out, "history.jsonl"), history); err != nil {
		r.sum.Warnings = append(r.sum.Warnings, err.Error())
	}
	r.sum.Files["history"] = "history.jsonl"
	title := fmt.Sprintf("jepsen-lite %s: %d nodes (%s), %d clients, limit %d/%s: %s",
		o.name, o.nodes, r.mode, o.clients, o.limit, o.window, r.sum.Verdict)
	if err := writePicture(filepath.Join(o.out, "run.png"), history, faults, finalStart, finalEnd, o.timeout, title); err != nil {
		r.sum.Warnings = append(r.sum.Warnings, "picture: "+err.Error())
		r.log.Printf("picture: %v", err)
	} else {
		r.sum.Files["picture"] = "run.png"
	}
	r.writeSummary()

	c, a := r.sum.Counts, r.sum.Availability
	detail := fmt.Sprintf("%d ops (%d hits incl. %d multi-key: %d allowed, %d refused, %d unknown, %d failed; %d peeks), %d faults, availability %s overall / %s no-fault / %s during faults, %s, wall %s, out %s",
		c.Ops, c.Hits, c.Multi, c.Allowed, c.Refused, c.UnknownHits, c.FailedHits, c.Peeks, len(faults),
		a.Overall, a.NoFault, a.DuringFaults, convWord(r.sum.Convergence), time.Since(r.t0).Round(time.Second), o.out)
	if r.partitions != "run" {
		detail += "; PARTITIONS " + strings.ToUpper(r.partitions)
	}
	if r.sum.Valid {
		return exitValid, "jepsen-lite: VALID " + detail
	}
	for _, f := range r.sum.Failures {
		r.log.Loudf("FAILED: %s", f)
	}
	return exitInvalid, "jepsen-lite: INVALID " + strings.Join(firstN(r.sum.Failures, 3), "; ") + " -- " + detail
}

func convWord(c convergence) string {
	if c.OK {
		return fmt.Sprintf("converged at index %d", c.Index)
	}
	return "NOT converged"
}

func firstN[T any](s []T, n int) []T {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// writeSummary fills in the run metadata and writes summary.json.
func (r *runner) writeSummary() {
	o := r.o
	r.sum.Run.Name, r.sum.Run.Mode, r.sum.Run.Out = o.name, r.mode, o.out
	r.sum.Run.Started = r.t0.Format(time.RFC3339)
	r.sum.Run.WallSeconds = time.Since(r.t0).Seconds()
	r.sum.Run.Seed = o.seed
	r.sum.Run.Flags = map[string]any{
		"nodes": o.nodes, "clients": o.clients, "keys": o.keys, "limit": o.limit, "window": o.window.String(),
		"duration": o.duration.String(), "faultDuration": o.faultDuration.String(), "quiet": o.quiet.String(),
		"final": o.final.String(), "nemesis": o.nemesis, "rate": o.rate, "peekRatio": o.peekRatio,
		"multiRatio": o.multiRatio, "policies": o.policies,
		"timeout": o.timeout.String(), "skew": o.skew.String(), "checkTimeout": o.checkTimeout.String(),
	}
	r.sum.Partitions = r.partitions
	if r.partitions == "run" {
		n := 0
		for _, f := range r.sum.Faults {
			if isPartition(f.Name) && f.Error == "" {
				n++
			}
		}
		r.sum.Partitions = fmt.Sprintf("run: %d partition faults", n)
		if !slices.ContainsFunc(o.nemeses, isPartition) {
			r.sum.Partitions = "not requested"
		}
	}
	r.sum.PartitionMethod = r.method
	if r.cl != nil {
		r.sum.Run.NodeServeFlags = r.cl.common
		r.sum.Run.Nodes = nil
		for i, s := range r.cl.specs {
			r.cl.mu.Lock()
			starts := r.cl.starts[i]
			r.cl.mu.Unlock()
			r.sum.Run.Nodes = append(r.sum.Run.Nodes, nodeInfo{ID: s.id, HTTP: s.httpAddr, Raft: s.raftAddr, NS: s.ns,
				DataDir: s.dataDir, LogFile: s.logPath, Restarts: starts})
		}
		r.sum.Files["nodeLogs"] = logDir(o.out)
	}
	r.sum.Files["runnerLog"] = "jepsen-lite.log"
	if err := writeJSON(filepath.Join(o.out, "summary.json"), r.sum); err != nil {
		r.log.Printf("%v", err)
	}
}
