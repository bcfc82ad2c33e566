// Command jepsen-lite is rlnode's fault-injection test. It builds the
// rlnode binary, runs a real cluster (each node in its own network
// namespace when it can), drives it with concurrent clients while a nemesis
// partitions, kills, pauses, skews clocks and changes membership, then
// checks the history for linearizability and never-more-than-N, checks that
// the nodes converged, and writes a report. It treats rlnode as a black
// box: only the binary and its HTTP API. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Exit codes.
const (
	exitValid   = 0
	exitInvalid = 1
	exitUsage   = 2
	exitAborted = 3 // setup failed or interrupted: nothing was judged
)

// Serve flags every node runs with beyond the limiter settings: debug
// endpoints for the clock nemesis, and snapshots so frequent (with a short
// log tail kept behind them) that a wiped node rejoining after the
// membership fault has to be caught up with InstallSnapshot, not by log
// replay.
var nodeFixedFlags = []string{
	"--debug-endpoints",
	"--snapshot-interval", "1s",
	"--trailing-logs", "50",
}

type options struct {
	nodes         int
	clients       int
	keys          int
	warmKeys      int
	limit         int64
	window        time.Duration
	duration      time.Duration
	faultDuration time.Duration
	quiet         time.Duration
	final         time.Duration
	nemesis       string
	out           string
	rate          float64
	peekRatio     float64
	multiRatio    float64
	policies      bool
	leased        bool
	budgets       bool
	perCall       bool
	appHolders    int
	timeout       time.Duration
	skew          time.Duration
	seed          uint64
	name          string
	loopback      bool
	binary        string
	checkTimeout  time.Duration
	serveArgs     string
	cleanup       bool
	recheck       string
	insecure      bool

	// The multi-cluster mode (--regions, regions.go).
	regions       bool
	regionDelays  string
	delays        []time.Duration // parsed --region-delays: region a's, region b's
	regionHolders string
	holders       []int // parsed --region-holders: region a's, region b's
	globalLimit   int64
	globalWindow  time.Duration
	demand        float64
	split         float64
	parentShare   float64
	regionKeys    int
	demandPeriod  time.Duration
	demandShape   string
	globalBucket  bool
	brokenRegion  bool
	faultRegion   string

	nemeses []string // parsed --nemesis
	skipped []string // dropped from an alias because they need 5 nodes

	// snapThreshold is the nodes' --snapshot-threshold.
	snapThreshold int
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("jepsen-lite", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.nodes, "nodes", 3, "cluster size: 3 or 5")
	fs.IntVar(&o.snapThreshold, "snapshot-threshold", 200, "rlnode --snapshot-threshold: log entries between snapshots; low, so a node the membership fault wipes rejoins by installing a snapshot")
	fs.IntVar(&o.clients, "clients", 8, "concurrent client workers")
	fs.IntVar(&o.warmKeys, "warm-keys", 24, "with --leased, this many more keys of the leased policies, a quarter of the hits picked among them by a Zipf law (s=1.07): a few hot, most warm")
	fs.IntVar(&o.keys, "keys", 6, "number of rate-limited keys the clients share (spread over the policies, paired for multi-key checks)")
	fs.Int64Var(&o.limit, "limit", 5, "rlnode --limit: hits per key per window")
	fs.DurationVar(&o.window, "window", 2*time.Second, "rlnode --window")
	fs.DurationVar(&o.duration, "duration", 60*time.Second, "length of the faulted phase (extended if too short for one round of every nemesis)")
	fs.DurationVar(&o.faultDuration, "fault-duration", 4*time.Second, "how long each fault is held before it is healed")
	fs.DurationVar(&o.quiet, "quiet", 3*time.Second, "quiet gap after each heal (and warm-up before the first fault)")
	fs.DurationVar(&o.final, "final", 5*time.Second, "final quiet phase of ops once everything is healed and settled")
	fs.StringVar(&o.nemesis, "nemesis", "all", "comma list of faults: "+strings.Join(allNemeses, ", ")+"; or partition, clock-skew, all, none")
	fs.StringVar(&o.out, "out", "", "report directory (default ./jepsen-out/<timestamp>)")
	fs.Float64Var(&o.rate, "rate", 200, "target ops per second over all clients (0 = as fast as possible)")
	fs.Float64Var(&o.peekRatio, "peek-ratio", 0.2, "share of ops that are linearizable peeks of fixed-window keys (GET /v1/status/...)")
	fs.Float64Var(&o.multiRatio, "multi-ratio", 0.1, "share of ops that are all-or-nothing multi-key checks across a pair of keys (POST /v1/check; needs --policies)")
	fs.BoolVar(&o.policies, "policies", true, "create a fixed-window, a sliding-window and a two-limit token-bucket policy through the API and spread the keys over them; --policies=false: every key in the default policy (--limit/--window), no multi-key checks, no raise-limit")
	fs.BoolVar(&o.perCall, "percall", true, "also drive limits given per call (gubernator's API through the HTTP gateway: a token bucket and a leaky bucket key, checked: at most the limit per token window, never more than a full leaky bucket plus what leaked); waits up to 30s for the version gate, then skipped, and said so")
	fs.BoolVar(&o.budgets, "budgets", true, "with --policies, also drive concurrency permits and reservations (checked: never more than the limit live, the limit holds after settles); waits up to 30s for the version gate, then skipped, and said so, if the cluster still refuses them")
	fs.IntVar(&o.appHolders, "app-holders", 2, "client workers that decide their leased keys' hits in-process through client.Local (each an application holder), the rest over HTTP")
	fs.BoolVar(&o.leased, "leased", true, "with --policies, also a leased policy of each algorithm, one key each (nodes decide them from leases; checked for never over the limit, with under-admission measured, not for linearizability)")
	fs.DurationVar(&o.timeout, "timeout", 1500*time.Millisecond, "client per-request timeout")
	fs.DurationVar(&o.skew, "skew", 5*time.Second, "clock offset the clock-skew nemeses apply")
	fs.Uint64Var(&o.seed, "seed", 0, "random seed for the schedule, targets and workload (0 = from the clock)")
	fs.StringVar(&o.name, "name", "", "run name (1-8 of [a-z0-9]) used in namespace/bridge names; leftovers of the same name are deleted first (default random)")
	fs.BoolVar(&o.loopback, "loopback", false, "do not use network namespaces: run on 127.0.0.1 without partitions")
	fs.StringVar(&o.binary, "binary", "", "use this rlnode binary instead of building ./cmd/rlnode")
	fs.DurationVar(&o.checkTimeout, "check-timeout", 60*time.Second, "linearizability checker budget per key")
	fs.StringVar(&o.serveArgs, "serve-args", "", "extra flags for every `rlnode serve`, space separated (e.g. \"--log-level debug\")")
	fs.BoolVar(&o.insecure, "insecure", false, "run the nodes --insecure, without TLS and cluster token (default: mutual TLS from `rlnode tls init` and a token file)")
	fs.BoolVar(&o.cleanup, "cleanup", false, "only remove namespaces/bridges left by runs whose runner died, then exit")
	fs.BoolVar(&o.regions, "regions", false, "multi-cluster mode: a parent cluster of 3 nodes and regions a and b of 3 nodes each (rlnode serve --region NAME --parent URLs), the region-to-parent paths through delay proxies, a global policy hammered from both regions, faults inside and between them; checked: no global window allows more than its limit (loopback, --insecure; see README)")
	fs.StringVar(&o.regionDelays, "region-delays", "50ms,100ms", "with --regions: the delay each way of region a's and region b's paths to the parent")
	fs.Int64Var(&o.globalLimit, "global-limit", 400, "with --regions: the global policy's limit per --global-window (fixed window, written at the parent)")
	fs.DurationVar(&o.globalWindow, "global-window", 10*time.Second, "with --regions: the global policy's window")
	fs.Float64Var(&o.demand, "demand", 1.5, "with --regions: total hits sent per window, as a multiple of the limit (over every key)")
	fs.Float64Var(&o.split, "split", 0.6, "with --regions: region a's share of the regional demand (b gets the rest)")
	fs.Float64Var(&o.parentShare, "parent-share", 0.05, "with --regions: share of the demand sent to the parent's own nodes")
	fs.IntVar(&o.regionKeys, "region-keys", 1, "with --regions: keys of the global policy the demand is spread over (each its own global window)")
	fs.DurationVar(&o.demandPeriod, "demand-period", 7*time.Second, "with --regions: region a is busy (1.75x its mean demand) for half this period and quiet (0.25x) for the other half; region b likewise with 1.618 times the period (so the total wanders under and over the limit); 0: steady demand")
	fs.StringVar(&o.demandShape, "demand-shape", "wander", "with --regions: wander (each region busy and quiet in turn, split by --split) or burst (region a bursts a limit's 15% after each window end and trickles 2.5/s between, holding units it no longer needs when a window ends; region b sends --demand steadily)")
	fs.BoolVar(&o.globalBucket, "global-bucket", true, "with --regions: also a token-bucket global policy (a quarter of --global-limit per --global-window, burst a fifth of that), one key, checked: no run of allowed hits beyond burst + refill over all regions")
	fs.BoolVar(&o.brokenRegion, "broken-region", false, "with --regions: start region a with --debug-region-ignore-slice-deadline (a region that spends slices past their deadline): the run must come out INVALID")
	fs.StringVar(&o.regionHolders, "region-holders", "2,1", "with --regions: how many of region a's and region b's load workers are application holders, deciding the fixed-window global policy's hits in-process through client.Local from sub-leases of their region's slices (at most a region's workers)")
	fs.StringVar(&o.faultRegion, "fault-region", "", "with --regions: aim every region fault at this region (a or b; default: a random region per fault)")
	fs.StringVar(&o.recheck, "recheck", "", "only run the checker again over the history of the finished run in this directory (its --out), then exit")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: go run ./jepsen-lite [flags]\n\nFault-injection test for rlnode (see jepsen-lite/README.md).\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var errs []error
	if o.nodes != 3 && o.nodes != 5 {
		errs = append(errs, fmt.Errorf("--nodes %d: want 3 or 5", o.nodes))
	}
	if o.snapThreshold < 1 {
		errs = append(errs, fmt.Errorf("--snapshot-threshold %d: must be at least 1", o.snapThreshold))
	}
	if o.clients < 1 || o.keys < 1 || o.limit < 1 {
		errs = append(errs, errors.New("--clients, --keys and --limit must be at least 1"))
	}
	if o.appHolders < 0 {
		errs = append(errs, fmt.Errorf("--app-holders %d: must not be negative", o.appHolders))
	}
	if o.window < time.Millisecond || o.duration < 0 || o.faultDuration <= 0 || o.quiet < 0 || o.final <= 0 || o.timeout <= 0 {
		errs = append(errs, errors.New("--window, --fault-duration, --final and --timeout must be positive; --duration and --quiet not negative"))
	}
	if o.peekRatio < 0 || o.multiRatio < 0 || o.peekRatio+o.multiRatio > 1 || o.rate < 0 {
		errs = append(errs, errors.New("--peek-ratio and --multi-ratio must be in [0,1] with a sum of at most 1, and --rate not negative"))
	}
	if o.name != "" && !runNameRE.MatchString(o.name) {
		errs = append(errs, fmt.Errorf("--name %q: want 1-8 characters of [a-z0-9]", o.name))
	}
	var err error
	if o.regions {
		errs = append(errs, o.validateRegions()...)
	} else if o.nemeses, o.skipped, err = parseNemeses(o.nemesis, o.nodes, o.policies); err != nil {
		errs = append(errs, err)
	}
	return o, errors.Join(errs...)
}

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

func realMain(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitValid
	}
	if err != nil {
		fmt.Fprintf(stderr, "jepsen-lite: %v\n", err)
		return exitUsage
	}
	t0 := time.Now()
	log := newLogger(stdout, t0)
	if o.recheck != "" {
		code, err := recheck(o.recheck, o.checkTimeout, stdout)
		if err != nil {
			fmt.Fprintf(stderr, "jepsen-lite: %v\n", err)
		}
		return code
	}
	if o.cleanup {
		reaped := reapStaleRuns(5, log)
		log.Printf("cleanup: reaped %d stale run(s) %v", len(reaped), reaped)
		return exitValid
	}
	if o.seed == 0 {
		o.seed = uint64(t0.UnixNano())
	}
	rng := rand.New(rand.NewPCG(o.seed, 0x6a657073656e))
	if o.name == "" {
		const alnum = "abcdefghijklmnopqrstuvwxyz0123456789"
		b := make([]byte, 6)
		for i := range b {
			b[i] = alnum[rng.IntN(len(alnum))]
		}
		o.name = string(b)
	}
	if o.out == "" {
		o.out = filepath.Join("jepsen-out", t0.Format("20060102-150405"))
	}
	if abs, err := filepath.Abs(o.out); err == nil {
		o.out = abs
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// After the first Ctrl-C the run cleans up; restoring the default
	// handler lets a second one end it at once.
	defer context.AfterFunc(ctx, func() {
		log.Loudf("interrupted: cleaning up (Ctrl-C again to exit at once)")
		stop()
	})()

	r := &runner{o: o, t0: t0, log: log, rng: rng, stdout: stdout}
	if o.regions {
		return (&regionRunner{runner: r}).run(ctx)
	}
	return r.run(ctx)
}
