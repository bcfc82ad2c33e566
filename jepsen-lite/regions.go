package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rlnode/rlnode/internal/delayproxy"
	"github.com/rlnode/rlnode/jepsen-lite/checker"
)

// The multi-cluster mode (--regions): a parent cluster and two regions of
// three nodes each on loopback, every region node reaching the parent's
// nodes through delay proxies (one per region and parent node); a global
// policy written at the parent; clients hitting the regions' nodes (and
// a few the parent's); faults inside regions and between them; and the
// check that the allowed hits of each global window, over all of them,
// never exceed its limit (regioncheck.go).

// globalPolicy is the run's fixed-window global policy; globalBucket its
// token-bucket one (--global-bucket): a quarter of --global-limit per
// --global-window, with a burst of a fifth of that.
const (
	globalPolicy = "jl-global"
	globalBucket = "jl-global-bucket"
)

// checkConfig is what the check judges against.
func (r *regionRunner) checkConfig() globalConfig {
	cfg := globalConfig{Policy: globalPolicy, Limit: r.o.globalLimit, WindowMs: r.o.globalWindow.Milliseconds(), SlackMs: 5}
	if r.o.globalBucket {
		cfg.Bucket, cfg.BucketLimit, cfg.BucketWindowMs, cfg.BucketBurst = globalBucket, r.bucketLimit(), cfg.WindowMs, r.bucketBurst()
	}
	return cfg
}

func (r *regionRunner) bucketLimit() int64 { return max(1, r.o.globalLimit/4) }
func (r *regionRunner) bucketBurst() int64 { return max(1, r.bucketLimit()/5) }

var regionNames = []string{"a", "b"}

// Demand shapes (--demand-shape).
const (
	// shapeWander: each region busy and quiet in turn, a's period
	// --demand-period and b's 1.618 times it, split by --split.
	shapeWander = "wander"
	// shapeBurst: region a bursts right after each window ends and
	// trickles between, so it holds units its demand no longer needs
	// when the window ends; region b hammers steadily and fills every
	// window early. A correct region lets a's leftover units expire; a
	// region that ignores its slices' deadlines spends them in the next
	// window, on top of the limit b fills.
	shapeBurst = "burst"
)

// validateRegions checks the multi-cluster flags and parses the delays
// and nemeses.
func (o *options) validateRegions() []error {
	var errs []error
	for _, f := range strings.Split(o.regionDelays, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d < 0 {
			errs = append(errs, fmt.Errorf("--region-delays %q: want two durations, e.g. 50ms,100ms", o.regionDelays))
			break
		}
		o.delays = append(o.delays, d)
	}
	if len(errs) == 0 && len(o.delays) != len(regionNames) {
		errs = append(errs, fmt.Errorf("--region-delays %q: want %d durations, one per region", o.regionDelays, len(regionNames)))
	}
	for _, f := range strings.Split(o.regionHolders, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			errs = append(errs, fmt.Errorf("--region-holders %q: want two counts, e.g. 2,1", o.regionHolders))
			break
		}
		o.holders = append(o.holders, n)
	}
	if len(o.holders) != len(regionNames) {
		errs = append(errs, fmt.Errorf("--region-holders %q: want %d counts, one per region", o.regionHolders, len(regionNames)))
	}
	if o.globalLimit < 1 || o.globalWindow < time.Second || o.regionKeys < 1 || o.demand <= 0 {
		errs = append(errs, errors.New("--global-limit and --region-keys must be at least 1, --global-window at least 1s, --demand positive"))
	}
	if o.split <= 0 || o.split >= 1 || o.parentShare < 0 || o.parentShare >= 1 || o.demandPeriod < 0 {
		errs = append(errs, errors.New("--split must be in (0,1), --parent-share in [0,1), --demand-period not negative"))
	}
	if o.demandShape != shapeWander && o.demandShape != shapeBurst {
		errs = append(errs, fmt.Errorf("--demand-shape %q: want %s or %s", o.demandShape, shapeWander, shapeBurst))
	}
	if o.faultRegion != "" && o.faultRegion != "a" && o.faultRegion != "b" {
		errs = append(errs, fmt.Errorf("--fault-region %q: want a or b", o.faultRegion))
	}
	var err error
	if o.nemeses, err = parseRegionNemeses(o.nemesis); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// regionRunner is one multi-cluster run. It reuses the runner's report
// directory, log, binary and verdict; it owns the three clusters, the
// proxies and the workload, and tears them all down before returning.
type regionRunner struct {
	*runner
	parent  *cluster
	regions []*regionCluster
	rsum    regionSummary
	tgts    []regionTarget // the load's targets, once started
}

// regionSummary is summary.json of the multi-cluster mode.
type regionSummary struct {
	Valid        bool                `json:"valid"`
	Verdict      string              `json:"verdict"`
	Failures     []string            `json:"failures"`
	Warnings     []string            `json:"warnings"`
	Run          map[string]any      `json:"run"`
	Holders      string              `json:"holders"` // application holders in the regions and what they decided
	Partitions   string              `json:"partitions"`
	TokenBucket  string              `json:"tokenBucket"`
	Faults       []faultRecord       `json:"faults"`
	Counts       map[string]int      `json:"counts"`
	Availability map[string]string   `json:"availability"`
	Global       globalResult        `json:"global"`
	Violations   []checker.Violation `json:"violations"`
	Convergence  map[string]any      `json:"convergence"`
	Crashes      []crash             `json:"crashes"`
	Nodes        []nodeInfo          `json:"nodes"`
}

func (r *regionRunner) run(ctx context.Context) int {
	o := r.o
	r.rsum = regionSummary{Failures: []string{}, Warnings: []string{}, Faults: []faultRecord{}, Crashes: []crash{},
		Convergence: map[string]any{}, Violations: []checker.Violation{}}
	closeLog, code, ok := r.prepareOut()
	if !ok {
		return code
	}
	defer closeLog()
	r.log.Printf("jepsen-lite multi-cluster run %q: a parent and regions %v of 3 nodes each, paths to the parent delayed %v each way, global policy %d per %s over %d key(s), demand %.1fx split %.0f/%.0f (parent %.0f%%), broken region: %v, out %s, seed %d",
		o.name, regionNames, o.delays, o.globalLimit, o.globalWindow, o.regionKeys, o.demand, o.split*100, (1-o.split)*100, o.parentShare*100, o.brokenRegion, o.out, o.seed)
	code, line, err := r.execute(ctx)
	if err != nil && ctx.Err() != nil {
		err = errors.New("interrupted by SIGINT/SIGTERM")
	}
	if err != nil {
		r.rsum.Valid, r.rsum.Verdict = false, "INVALID"
		r.rsum.Failures = append(r.rsum.Failures, "run aborted: "+err.Error())
		r.writeRegionSummary()
		r.verdict(fmt.Sprintf("jepsen-lite: INVALID aborted: %v (out: %s)", err, o.out))
		return exitAborted
	}
	r.verdict(line)
	return code
}

func (r *regionRunner) execute(ctx context.Context) (int, string, error) {
	o := r.o
	bin, err := r.binary(ctx)
	if err != nil {
		return 0, "", err
	}
	r.adm = newAdmin(&security{})
	defer r.adm.close()
	defer r.teardown() // also what a layout that failed half-way started
	if err := r.layout(bin); err != nil {
		return 0, "", err
	}
	if err := bootCluster(ctx, r.parent, r.adm, r.log); err != nil {
		return 0, "", fmt.Errorf("parent: %w", err)
	}
	for _, rg := range r.regions {
		if err := bootCluster(ctx, rg.cl, r.adm, r.log); err != nil {
			return 0, "", fmt.Errorf("region %s: %w", rg.name, err)
		}
	}
	if err := r.definePolicy(ctx); err != nil {
		return 0, "", err
	}
	r.rsum.TokenBucket = "not requested (--global-bucket=false)"
	if o.globalBucket {
		r.rsum.TokenBucket = fmt.Sprintf("%s: %d per %s, burst %d", globalBucket, r.bucketLimit(), o.globalWindow, r.bucketBurst())
	}
	r.rsum.Partitions = "inside regions: skipped (loopback, no network namespaces); region from parent: the region-cut fault (proxies)"

	targets := r.targets()
	r.tgts = targets
	load := newRegionLoad(targets, r.loadKeys(), o.timeout, o.seed)
	if err := load.start(ctx); err != nil {
		return 0, "", fmt.Errorf("start the load: %w", err)
	}
	defer load.stop()
	for _, t := range targets {
		if t.holders > 0 {
			r.log.Printf("region %s: %d of its %d load workers are application holders (client.Local against its nodes; %s hits decided in-process from sub-leases)",
				t.region, t.holders, t.workers, globalPolicy)
		}
	}

	nm := &regionNemesis{parent: r.parent, regions: r.regions, adm: r.adm, rng: r.rng, log: r.log, t0: r.t0,
		fault: o.faultDuration, quiet: o.quiet, target: o.faultRegion}
	r.log.Printf("warm-up: %s", o.quiet)
	if err := sleepCtx(ctx, o.quiet); err != nil {
		return 0, "", err
	}
	duration, extended := effectiveDuration(o.nemeses, o.duration, o.faultDuration, o.quiet)
	if extended {
		note := fmt.Sprintf("--duration %s is too short for one round of %d nemeses: extended to %s", o.duration, len(o.nemeses), duration)
		r.log.Loudf("%s", note)
		r.rsum.Warnings = append(r.rsum.Warnings, note)
	}
	phaseStart := time.Now()
	r.log.Printf("faulted phase: %s, nemeses %v", duration, o.nemeses)
	faults, err := nm.run(ctx, buildPlan(o.nemeses, duration, o.faultDuration, o.quiet, r.rng), len(o.nemeses), phaseStart, duration)
	r.rsum.Faults = append(r.rsum.Faults, faults...)
	if err != nil {
		return 0, "", err
	}
	if err := nm.healAll(); err != nil {
		r.rsum.Warnings = append(r.rsum.Warnings, "heal-all: "+err.Error())
	}
	for _, cl := range r.clusters() {
		if err := waitSettled(ctx, cl, r.adm, 30*time.Second); err != nil {
			if ctx.Err() != nil {
				return 0, "", ctx.Err()
			}
			r.rsum.Warnings = append(r.rsum.Warnings, "settle: "+err.Error())
		}
	}
	r.log.Printf("final phase: %s with no fault", o.final)
	if err := sleepCtx(ctx, o.final); err != nil {
		return 0, "", err
	}
	hits := load.stop()
	r.log.Printf("workload stopped: %d records", len(hits))
	for _, cl := range r.clusters() {
		conv := checkConvergence(ctx, cl, r.adm, 20*time.Second)
		r.rsum.Convergence[cl.specs[0].id[:1]] = conv
		if !conv.OK {
			r.rsum.Failures = append(r.rsum.Failures, fmt.Sprintf("cluster of %s not converged: %s", cl.specs[0].id, conv.Detail))
		}
		if err := cl.stopAll(10 * time.Second); err != nil {
			r.log.Printf("stopping nodes: %v", err)
		}
	}
	code, line := r.judge(hits, faults)
	return code, line, nil
}

// layout picks the addresses, starts the proxies (region to parent) and
// makes the three clusters (not yet started).
func (r *regionRunner) layout(bin string) error {
	o := r.o
	// One batch of ports for the nodes and the proxies: a proxy asking
	// the kernel for a port of its own once the batch is released could
	// be given a node's.
	n := 3 * (1 + len(regionNames))
	ports, err := freePorts(2*n + 3*len(regionNames))
	if err != nil {
		return err
	}
	proxyPorts := ports[2*n:]
	next := 0
	specs := func(prefix string) []nodeSpec {
		var out []nodeSpec
		for i := range 3 {
			id := fmt.Sprintf("%s%d", prefix, i+1)
			out = append(out, nodeSpec{idx: i, id: id,
				httpAddr: net.JoinHostPort("127.0.0.1", fmt.Sprint(ports[next])),
				raftAddr: net.JoinHostPort("127.0.0.1", fmt.Sprint(ports[next+1])),
				dataDir:  filepath.Join(o.out, "data", id), logPath: filepath.Join(logDir(o.out), id+".log")})
			next += 2
		}
		return out
	}
	common := []string{"--insecure", "--snapshot-threshold", fmt.Sprint(o.snapThreshold)}
	common = append(common, nodeFixedFlags...)
	common = append(common, strings.Fields(o.serveArgs)...)
	pspecs := specs("p")
	r.parent = newCluster(bin, pspecs, common, r.log, r.t0)
	for k, name := range regionNames {
		rg := &regionCluster{name: name, delay: o.delays[k], broken: o.brokenRegion && name == "a"}
		r.regions = append(r.regions, rg) // teardown closes its proxies, even on an error below
		var urls []string
		for _, ps := range pspecs {
			p, err := delayproxy.StartOn(net.JoinHostPort("127.0.0.1", fmt.Sprint(proxyPorts[0])), ps.httpAddr, rg.delay)
			proxyPorts = proxyPorts[1:]
			if err != nil {
				return err
			}
			rg.proxies = append(rg.proxies, p)
			urls = append(urls, "http://"+p.Addr)
		}
		flags := append(append([]string(nil), common...), "--region", name, "--parent", strings.Join(urls, ","))
		if rg.broken {
			flags = append(flags, "--debug-region-ignore-slice-deadline")
			r.log.Loudf("region %s is the BROKEN stand-in (--debug-region-ignore-slice-deadline): this run must come out INVALID", name)
		}
		rg.cl = newCluster(bin, specs(name), flags, r.log, r.t0)
	}
	return nil
}

func (r *regionRunner) clusters() []*cluster {
	var out []*cluster
	if r.parent != nil {
		out = append(out, r.parent)
	}
	for _, rg := range r.regions {
		if rg.cl != nil {
			out = append(out, rg.cl)
		}
	}
	return out
}

// teardown kills what still runs and closes the proxies.
func (r *regionRunner) teardown() {
	for _, cl := range r.clusters() {
		cl.killAll()
	}
	for _, rg := range r.regions {
		for _, p := range rg.proxies {
			p.Close()
		}
	}
}

// definePolicy writes the global policies at the parent and waits until
// every regional node mirrors them.
func (r *regionRunner) definePolicy(ctx context.Context) error {
	pols := map[string]map[string]any{globalPolicy: {"algorithm": "fixed_window", "consistency": "leased", "scope": "global",
		"limits": []map[string]any{{"limit": r.o.globalLimit, "window": r.o.globalWindow.String()}}}}
	if r.o.globalBucket {
		pols[globalBucket] = map[string]any{"algorithm": "token_bucket", "consistency": "leased", "scope": "global",
			"limits": []map[string]any{{"limit": r.bucketLimit(), "window": r.o.globalWindow.String(), "burst": r.bucketBurst()}}}
	}
	for name, body := range pols {
		err := retry(ctx, 30*time.Second, func() error {
			return r.adm.do(ctx, 5*time.Second, "PUT", r.parent.specs[0].url()+"/v1/policies/"+name, body, nil)
		})
		if err != nil {
			return fmt.Errorf("define the global policy %s at the parent: %w", name, err)
		}
		for _, rg := range r.regions {
			for _, s := range rg.cl.specs {
				err := retry(ctx, 30*time.Second, func() error {
					var p struct {
						Mirrored bool   `json:"mirrored"`
						Scope    string `json:"scope"`
					}
					if err := r.adm.do(ctx, 2*time.Second, "GET", s.url()+"/v1/policies/"+name, nil, &p); err != nil {
						return err
					}
					if !p.Mirrored || p.Scope != "global" {
						return fmt.Errorf("%s: policy %s not mirrored yet (%+v)", s.id, name, p)
					}
					return nil
				})
				if err != nil {
					return fmt.Errorf("region %s never mirrored the global policy %s: %w", rg.name, name, err)
				}
			}
		}
	}
	r.log.Printf("global policies written at the parent, mirrored by every regional node: %s (%d per %s, fixed window)%s",
		globalPolicy, r.o.globalLimit, r.o.globalWindow, map[bool]string{true: fmt.Sprintf(", %s (token bucket, %d per %s, burst %d)",
			globalBucket, r.bucketLimit(), r.o.globalWindow, r.bucketBurst()), false: ""}[r.o.globalBucket])
	return nil
}

// loadKeys are the keys the load hits, weighted by their policies'
// limits: --region-keys keys of the fixed window, and one of the token
// bucket with --global-bucket.
func (r *regionRunner) loadKeys() []loadKey {
	var keys []loadKey
	for i := range r.o.regionKeys {
		keys = append(keys, loadKey{policy: globalPolicy, key: fmt.Sprintf("k%d", i), weight: float64(r.o.globalLimit), bursts: true})
	}
	if r.o.globalBucket {
		keys = append(keys, loadKey{policy: globalBucket, key: "k0", weight: float64(r.bucketLimit())})
	}
	return keys
}

// targets splits the demand (see --demand-shape): the parent's share
// over its nodes, the rest between the regions.
func (r *regionRunner) targets() []regionTarget {
	o := r.o
	limits := o.globalLimit * int64(o.regionKeys)
	if o.globalBucket {
		limits += r.bucketLimit()
	}
	total := o.demand * float64(limits) / o.globalWindow.Seconds()
	workers := func(rate float64) int { return max(2, int(math.Ceil(rate*busyFactor/10))) }
	var out []regionTarget
	switch o.demandShape {
	case shapeBurst:
		// a: a burst of a limit's 15% per key after each window end and
		// a trickle of 2.5 hits a second; b: the whole --demand, steady.
		a, b := r.regions[0], r.regions[1]
		out = append(out,
			regionTarget{region: a.name, nodes: a.cl.specs, rate: 2.5, workers: 1, burst: int(max(8, o.globalLimit*15/100))},
			regionTarget{region: b.name, nodes: b.cl.specs, rate: total * (1 - o.parentShare), workers: workers(total)})
		for k := range out {
			out[k].holders = min(o.holders[k], out[k].workers)
		}
	default:
		shares := []float64{o.split, 1 - o.split}
		for k, rg := range r.regions {
			rate := total * (1 - o.parentShare) * shares[k]
			period := time.Duration(float64(o.demandPeriod) * math.Pow(math.Phi, float64(k)))
			w := workers(rate)
			out = append(out, regionTarget{region: rg.name, nodes: rg.cl.specs, rate: rate, workers: w, period: period, holders: min(o.holders[k], w)})
		}
	}
	if o.parentShare > 0 {
		rate := total * o.parentShare
		out = append(out, regionTarget{region: "parent", nodes: r.parent.specs, rate: rate, workers: workers(rate)})
	}
	return out
}
