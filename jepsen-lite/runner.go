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
	// budgetViolations are the permit and reservation models' findings,
	// and the per-call model's (percall.go).
	budgetViolations []checker.Violation
}

func (r *runner) run(ctx context.Context) int {
	o := r.o
	r.sum = summary{Failures: []string{}, Warnings: []string{}, Faults: []faultRecord{}, Crashes: []crash{},
		Violations: []checker.Violation{}, Files: map[string]any{}}
	closeLog, code, ok := r.prepareOut()
	if !ok {
		return code
	}
	defer closeLog()
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

// prepareOut makes the report directory and tees the runner's output
// into its log file; it refuses a directory that already holds a run.
// closeLog closes the log file; code is the exit code when !ok.
func (r *runner) prepareOut() (closeLog func(), code int, ok bool) {
	o := r.o
	// Node data dirs live under the report dir: reusing one would restart
	// nodes on an earlier run's Raft state (with that run's addresses).
	for _, leftover := range []string{"data", "summary.json"} {
		if _, err := os.Stat(filepath.Join(o.out, leftover)); err == nil {
			fmt.Fprintf(r.stdout, "jepsen-lite: --out %s already holds a run (%s); choose a new directory or remove it\n", o.out, leftover)
			return nil, exitUsage, false
		}
	}
	if err := os.MkdirAll(logDir(o.out), 0o755); err != nil {
		fmt.Fprintf(r.stdout, "jepsen-lite: INVALID aborted: create out dir: %v\n", err)
		return nil, exitAborted, false
	}
	logFile, err := os.Create(filepath.Join(o.out, "jepsen-lite.log"))
	if err != nil {
		return func() {}, 0, true
	}
	r.log.setOutput(io.MultiWriter(r.stdout, logFile))
	return func() { logFile.Close() }, 0, true
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

// execute does the whole run, one phase after the other. Cleanup
// (workload, processes, then network) is deferred here, so it happens on
// success, error and Ctrl-C alike.
func (r *runner) execute(ctx context.Context) (code int, verdict string, err error) {
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

	sec, err := r.newCluster(ctx, bin)
	if err != nil {
		return 0, "", err
	}
	defer r.cl.killAll()
	defer r.adm.close()
	if err := r.startCluster(ctx); err != nil {
		return 0, "", err
	}

	wl, err := r.startWorkload(ctx, sec)
	if err != nil {
		return 0, "", err
	}
	defer wl.stop()
	var bw *budgetWorkload
	if r.o.budgets && r.o.policies {
		var skipped string
		if bw, skipped = r.startBudgets(ctx, sec); skipped != "" {
			r.sum.Budgets = "skipped: " + skipped
			r.log.Loudf("BUDGETS (PERMITS, RESERVATIONS) SKIPPED: %s", skipped)
		} else {
			r.log.Printf("budgets workload started: permits of %s (limit %d), reservations of %s (limit %d per %s)",
				budgetPermitPolicy, budgetPermits, budgetReservePolicy, budgetReserveLimit, r.o.window)
			defer bw.stop()
		}
	}

	var cw *callWorkload
	if r.o.perCall {
		var skipped string
		if cw, skipped = r.startPerCall(ctx, sec); skipped != "" {
			r.sum.PerCall = "skipped: " + skipped
			r.log.Loudf("PER-CALL LIMITS SKIPPED: %s", skipped)
		} else {
			r.log.Printf("per-call workload started: gubernator's API, a token bucket of %d and a leaky bucket of %d per %s", callTokenLimit, callLeakyLimit, r.o.window)
			defer cw.stop()
		}
	}

	nm := &nemesis{cl: r.cl, net: r.net, adm: r.adm, rng: r.rng, log: r.log, t0: r.t0,
		fault: r.o.faultDuration, quiet: r.o.quiet, skew: r.o.skew, maxOffset: r.maxClockOffset(), pols: r.pols}
	faults, err := r.faultedPhase(ctx, nm)
	if err != nil {
		return 0, "", err
	}
	history, finalStart, finalEnd, err := r.finalPhase(ctx, nm, wl)
	if err != nil {
		return 0, "", err
	}
	if bw != nil {
		permits, reservations := bw.stop()
		// The cluster's clock may run ahead of the runner's by what the
		// clock-skew faults apply, at most --max-clock-offset.
		slack := (2*r.o.skew + time.Second).Milliseconds()
		var detail string
		r.budgetViolations, detail = checkBudgets(permits, reservations, slack)
		r.sum.Budgets = detail
		r.log.Printf("budgets: %s; %d violation(s)", detail, len(r.budgetViolations))
	}
	if cw != nil {
		slack := (2*r.o.skew + time.Second).Milliseconds()
		v, detail := checkPerCall(cw.stop(), r.o.window, slack)
		r.budgetViolations = append(r.budgetViolations, v...)
		r.sum.PerCall = detail
		r.log.Printf("%s; %d violation(s)", detail, len(v))
	}
	r.convergeAndStop(ctx)

	code, verdict = r.judge(history, faults, finalStart, finalEnd)
	return code, verdict, nil
}

// maxClockOffset is the nodes' --max-clock-offset: lifted past the skew
// when a clock-skew fault runs (see newCluster), else rlnode's default,
// which the clock-step fault steps clocks within and beyond.
func (r *runner) maxClockOffset() time.Duration {
	if slices.Contains(r.o.nemeses, nemClockForward) || slices.Contains(r.o.nemeses, nemClockBackward) {
		return 2*r.o.skew + time.Second
	}
	return 500 * time.Millisecond
}

// newCluster lays out the nodes, sets up their security and the flags
// every node shares, and makes the (not yet started) cluster and the
// admin client.
func (r *runner) newCluster(ctx context.Context, bin string) (*security, error) {
	o := r.o
	specs, err := r.nodeSpecs()
	if err != nil {
		return nil, err
	}
	sec, secFlags, err := setupSecurity(ctx, bin, o.out, specs, o.insecure)
	if err != nil {
		return nil, err
	}
	r.log.Printf("security: %s", sec.describe())
	common := []string{"--limit", fmt.Sprint(o.limit), "--window", o.window.String()}
	common = append(common, nodeFixedFlags...)
	common = append(common, "--snapshot-threshold", fmt.Sprint(o.snapThreshold))
	// The clock-skew faults test the state machine's time clamp, which must
	// hold for any skew that gets past rlnode's clock discipline; with the
	// default --max-clock-offset (500 ms) a skewed node would simply be
	// kept from leading and the clamp never tried. The discipline itself is
	// tested by cmd/rlnode's TestSkewedNodeNeverLeads. --serve-args can
	// set it back (the last flag wins).
	common = append(common, "--max-clock-offset", r.maxClockOffset().String())
	if o.leased && o.policies {
		// The workload spreads ~--rate ops over every key and node, far
		// below the default hot threshold: make leased keys hot at a few
		// hits a second so the run exercises leases.
		common = append(common, "--lease-hot-hits", "4")
	}
	common = append(common, secFlags...)
	common = append(common, strings.Fields(o.serveArgs)...)
	r.cl = newCluster(bin, specs, common, r.log, r.t0)
	r.adm = newAdmin(sec)
	return sec, nil
}

// startWorkload creates the run's policies (with --policies) and starts
// the clients.
func (r *runner) startWorkload(ctx context.Context, sec *security) (*workload, error) {
	o := r.o
	specs := r.cl.specs
	var algorithms, policyNames []string
	var leased []bool
	if o.policies {
		r.pols = newPolicySet(o.limit, o.window, o.leased && o.policies)
		var urls []string
		for _, s := range specs {
			urls = append(urls, s.url())
		}
		if err := r.pols.create(ctx, r.adm, urls); err != nil {
			return nil, fmt.Errorf("create the run's policies (does this rlnode have PUT /v1/policies? --policies=false runs without): %w", err)
		}
		r.log.Printf("policies created: %s", r.pols.describe())
		policyNames, algorithms, leased = r.pols.names(), r.pols.algorithms(), r.pols.leasedFlags()
	}
	ts, pairs := targets(o.keys, policyNames, algorithms, leased, o.warmKeys)
	var keys []string
	for _, t := range ts {
		keys = append(keys, t.key)
	}
	wl := newWorkload(workloadConfig{t0: r.t0, nodes: specs, targets: ts, pairs: pairs, tls: sec.client, clients: o.clients, rate: o.rate,
		peekRatio: o.peekRatio, multiRatio: o.multiRatio, timeout: o.timeout, seed: o.seed, appHolders: o.appHolders})
	wl.start(ctx)
	r.log.Printf("workload started: %d clients, ~%.0f ops/s, %.0f%% peeks, %.0f%% multi-key checks over %d pairs, keys %v",
		o.clients, o.rate, o.peekRatio*100, o.multiRatio*100, len(pairs), keys)
	return wl, nil
}

// faultList is the nemeses this run can execute: without namespaces the
// partitions are dropped. It records what was requested and what was
// skipped, and why, in the summary.
func (r *runner) faultList() []string {
	o := r.o
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
	return list
}

// faultedPhase warms up, then runs the nemesis schedule for --duration
// (extended, and said so, if that is too short for one round).
func (r *runner) faultedPhase(ctx context.Context, nm *nemesis) ([]faultRecord, error) {
	o := r.o
	list := r.faultList()
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
		return nil, err
	}
	phaseStart := time.Now()
	r.log.Printf("faulted phase: %s, nemeses %v", duration, list)
	faults, err := nm.run(ctx, plan, len(list), phaseStart, duration)
	r.sum.Faults = append(r.sum.Faults, faults...)
	if err != nil {
		return nil, err
	}
	r.sum.Run.Duration = time.Since(phaseStart).Round(time.Millisecond).String()
	r.log.Printf("faulted phase over after %s (%d faults); healing everything", time.Since(phaseStart).Round(time.Second), len(faults))
	return faults, nil
}

// finalPhase heals everything, waits for the cluster to settle, runs
// --final of ops with no fault and stops the workload. It returns the
// history and the final phase's bounds (seconds since the run started).
func (r *runner) finalPhase(ctx context.Context, nm *nemesis, wl *workload) (history []opRecord, finalStart, finalEnd float64, err error) {
	if err := nm.healAll(ctx); err != nil {
		r.sum.Warnings = append(r.sum.Warnings, "heal-all: "+err.Error())
		r.log.Loudf("heal-all: %v", err)
	}
	if err := waitSettled(ctx, r.cl, r.adm, 30*time.Second); err != nil {
		if ctx.Err() != nil {
			return nil, 0, 0, ctx.Err()
		}
		r.sum.Warnings = append(r.sum.Warnings, "settle: "+err.Error())
		r.log.Loudf("%v", err)
	} else {
		r.log.Printf("cluster settled")
	}
	finalStart = time.Since(r.t0).Seconds()
	r.log.Printf("final quiet phase: %s", r.o.final)
	if err := sleepCtx(ctx, r.o.final); err != nil {
		return nil, 0, 0, err
	}
	history = wl.stop()
	finalEnd = time.Since(r.t0).Seconds()
	r.sum.Run.FinalPhase = [2]float64{finalStart, finalEnd}
	r.log.Printf("workload stopped: %d records", len(history))
	return history, finalStart, finalEnd, nil
}

// convergeAndStop checks convergence while the nodes still run (the
// check needs their answers), then stops them.
func (r *runner) convergeAndStop(ctx context.Context) {
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
	var ports []int
	if r.net == nil {
		var err error
		if ports, err = freePorts(2 * r.o.nodes); err != nil {
			return nil, err
		}
	}
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
			s.httpAddr = net.JoinHostPort("127.0.0.1", fmt.Sprint(ports[2*i]))
			s.raftAddr = net.JoinHostPort("127.0.0.1", fmt.Sprint(ports[2*i+1]))
		}
		specs = append(specs, s)
	}
	return specs, nil
}

// freePorts asks the kernel for n distinct unused loopback ports. All n
// listeners stay open until the last is found: once one is closed the
// kernel may offer its port again, and two nodes given one port lose a race
// for it. Another process could still take a port before its node binds;
// such a node shows up as a crash with the reason in its log.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// startCluster bootstraps n1 and joins the others (bootCluster).
func (r *runner) startCluster(ctx context.Context) error {
	return bootCluster(ctx, r.cl, r.adm, r.log)
}
