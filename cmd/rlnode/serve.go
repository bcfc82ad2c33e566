package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	gometrics "github.com/hashicorp/go-metrics/compat"
	gmprom "github.com/hashicorp/go-metrics/compat/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/cluster/storage"
	"github.com/rlnode/rlnode/cmd/rlnode/internal/cli"
	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/gubapi"
	"github.com/rlnode/rlnode/httpapi"
	"github.com/rlnode/rlnode/internal/connlimit"
	"github.com/rlnode/rlnode/internal/tracing"
	"github.com/rlnode/rlnode/lease"
	"github.com/rlnode/rlnode/metrics"
	"github.com/rlnode/rlnode/policy"
	"github.com/rlnode/rlnode/rlqs"
	"github.com/rlnode/rlnode/rls"
	"github.com/rlnode/rlnode/tlsconf"
)

type serveConfig struct {
	id, httpAddr, raftAddr, httpAdvertise, raftAdvertise string
	dataDir                                              string
	raftLog                                              string
	limit                                                int64
	window                                               time.Duration
	policiesFile                                         string
	join                                                 string
	logLevel                                             string
	logJSON                                              bool
	token                                                string
	leaveOnShutdown                                      bool
	snapshotThreshold                                    uint64
	snapshotInterval                                     time.Duration
	trailingLogs                                         uint64
	debugEndpoints                                       bool
	debugClockOffset                                     time.Duration
	maxBatch, maxInflight, maxForwardInflight            int
	leaseHotHits                                         int
	shutdownTimeout                                      time.Duration
	pprofAddr                                            string
	grpcAddr                                             string
	rlsOpt                                               rlsFlags
	rlqsAddr                                             string
	rlqsLease, rlqsTransit                               time.Duration
	grpcBounds                                           grpcBounds
	budgetCaps                                           budgetCaps
	gub                                                  gubFlags
	waitForJoin                                          bool
	rejoinEmpty                                          bool
	joinCatchupTimeout                                   time.Duration
	bootstrapExpect                                      int
	maxClockOffset                                       time.Duration
	maxPermitTTL                                         time.Duration
	raftTiming                                           cluster.Timing
	trustedProxies                                       string
	headers                                              httpapi.HeaderSet
	trusted                                              []netip.Prefix
	raftTuning                                           cluster.RaftTuning
	raftBatchApply                                       bool
	sec                                                  securityConfig
	httpLimits                                           httpLimits
	fds                                                  fdBudget
	region                                               regionFlags
}

// serveFlags makes serve's flag set; asked for, its help goes to help.
func serveFlags(help io.Writer) (*flag.FlagSet, *serveConfig) {
	c := &serveConfig{}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(help)
	fs.Usage = serveUsage(fs)
	fs.StringVar(&c.id, "id", "", "node id (default: the raft advertise address)")
	fs.StringVar(&c.httpAddr, "http-addr", "127.0.0.1:8080", "address the HTTP API listens on")
	fs.StringVar(&c.raftAddr, "raft-addr", "127.0.0.1:8300", "address Raft listens on")
	fs.StringVar(&c.httpAdvertise, "http-advertise", "", "HTTP address other nodes use to reach this one (default: --http-addr)")
	fs.StringVar(&c.raftAdvertise, "raft-advertise", "", "Raft address other nodes use to reach this one (default: --raft-addr)")
	fs.StringVar(&c.dataDir, "data-dir", "rlnode-data", "directory for the Raft log, stable store and snapshots")
	fs.StringVar(&c.raftLog, "raft-log", os.Getenv("RLNODE_RAFT_LOG"), "Raft log store, wal or bolt (default $RLNODE_RAFT_LOG, else what the data dir holds, else "+string(storage.Default)+"); a data dir keeps its kind: convert it with rlnode migrate-log")
	fs.Int64Var(&c.limit, "limit", 10, "seeds policy default when this node bootstraps a new cluster: hits allowed per client per window (later: rlnode policy set)")
	fs.DurationVar(&c.window, "window", 60*time.Second, "seeds policy default with --limit: the window's length, a duration with a unit (60s, 1m30s)")
	fs.StringVar(&c.policiesFile, "policies", "", "YAML or JSON file of policies to seed the replicated table with when this node bootstraps a new cluster (--limit/--window still seed \"default\" unless the file defines it)")
	fs.StringVar(&c.join, "join", "", "comma-separated HTTP addresses of existing members to join; a node with Raft state asks the leader through them whether it is still a member, and if not moves its state aside and joins empty")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: trace, debug, info, warn, error")
	fs.BoolVar(&c.logJSON, "log-json", false, "log as JSON lines")
	fs.StringVar(&c.token, "cluster-token", os.Getenv("RLNODE_CLUSTER_TOKEN"), "token required on admin and internal endpoints (default $RLNODE_CLUSTER_TOKEN)")
	fs.BoolVar(&c.waitForJoin, "wait-for-join", false, "with an empty data dir, neither bootstrap nor --join: wait until an operator adds this node with rlnode join")
	fs.BoolVar(&c.rejoinEmpty, "rejoin-empty", false, "when the data dir's Raft state is lost or damaged: move it aside and rejoin through --join as a new member (ignored when the state is healthy)")
	fs.IntVar(&c.bootstrapExpect, "bootstrap-expect", 0, "form a cluster of this many voters with the nodes in --join (give every node the same list; no node is special); 0: bootstrap alone when --join is empty")
	fs.DurationVar(&c.maxClockOffset, "max-clock-offset", 500*time.Millisecond, "a node leads only while a majority of the voters, itself included, have recent clock readings within this of its own; otherwise it refuses (and says so in its log, status and metrics)")
	fs.DurationVar(&c.joinCatchupTimeout, "join-catchup-timeout", 2*time.Minute, "on the leader: how long a joining server may take to catch up as a non-voter before it is removed again")
	fs.DurationVar(&c.maxPermitTTL, "max-permit-ttl", cluster.MaxPermitTTL, "longest TTL a caller may give a concurrency permit or a reservation on this node: how long a crashed holder can keep a slot or an unsettled charge (1ms to 1h)")
	fs.BoolVar(&c.leaveOnShutdown, "leave-on-shutdown", false, "remove this node from the cluster on SIGINT/SIGTERM (not on a crash)")
	fs.Uint64Var(&c.snapshotThreshold, "snapshot-threshold", 8192, "log entries between snapshots")
	fs.DurationVar(&c.snapshotInterval, "snapshot-interval", 30*time.Second, "how often to check whether a snapshot is due")
	fs.Uint64Var(&c.trailingLogs, "trailing-logs", 2048, "log entries kept behind a snapshot for slow followers")
	fs.BoolVar(&c.debugEndpoints, "debug-endpoints", false, "TESTING ONLY: enable /debug/clock-offset")
	fs.DurationVar(&c.debugClockOffset, "debug-clock-offset", 0, "TESTING ONLY: skew this node's leader clock by this much")
	fs.IntVar(&c.maxBatch, "max-batch", 512, "most hits in one log entry")
	fs.IntVar(&c.maxInflight, "max-inflight", 1, "log entries in flight at once on the leader (1 = pure group commit, measured fastest)")
	fs.IntVar(&c.maxForwardInflight, "max-forward-inflight", 4, "forwarding requests a follower has in flight to the leader at once")
	fs.IntVar(&c.leaseHotHits, "lease-hot-hits", cluster.DefaultLeaseHotHits, "hits of a key of a leased policy, in the current and previous second on this node, that make it hot: hot keys are decided from leases this node holds (the node lowers it, down to 2, while it sends more than 500 hits/s through the log: warm keys)")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long shutdown waits for in-flight requests")
	fs.DurationVar(&c.raftTiming.Heartbeat, "raft-heartbeat-timeout", cluster.DefaultTiming.Heartbeat, "Raft heartbeat timeout: how long a follower waits for the leader before calling an election")
	fs.DurationVar(&c.raftTiming.Election, "raft-election-timeout", cluster.DefaultTiming.Election, "Raft election timeout")
	fs.DurationVar(&c.raftTiming.LeaderLease, "raft-lease-timeout", cluster.DefaultTiming.LeaderLease, "how long a leader keeps leading without hearing from a quorum (at most the heartbeat timeout)")
	c.raftTiming.Commit = cluster.DefaultTiming.Commit
	fs.Var(&c.headers, "headers", "rate-limit headers of a check or forward-auth answer: ietf (RateLimit, RateLimit-Policy), legacy (X-RateLimit-Limit, -Remaining, -Reset) or both; fewer headers cost less per answer (docs/performance.md)")
	fs.StringVar(&c.trustedProxies, "trusted-proxies", "", "comma-separated CIDRs of reverse proxies whose X-Forwarded-For / X-Real-IP forward-auth (/v1/auth, key=ip) believes")
	fs.IntVar(&c.raftTuning.MaxAppendEntries, "raft-max-append-entries", cluster.DefaultRaftTuning.MaxAppendEntries, "most log entries in one AppendEntries RPC and one leader disk write (1..1024)")
	fs.IntVar(&c.raftTuning.MaxRPCsInFlight, "raft-max-rpcs-inflight", cluster.DefaultRaftTuning.MaxRPCsInFlight, "AppendEntries RPCs in flight to each follower (1 = no pipelining)")
	fs.BoolVar(&c.raftBatchApply, "raft-batch-apply", !cluster.DefaultRaftTuning.NoBatchApply, "write entries queued behind the leader's disk write together (raft's BatchApplyCh)")
	fs.StringVar(&c.rlqsAddr, "rlqs-addr", "", "serve Envoy's rate limit quota service (gRPC, envoy.service.rate_limit_quota.v3, leased policies) on this address, with the same TLS and token as --grpc-addr; off by default")
	fs.DurationVar(&c.rlqsLease, "rlqs-lease", 2*time.Second, "how long each grant behind an RLQS assignment lasts (the server renews before it ends)")
	fs.DurationVar(&c.rlqsTransit, "rlqs-transit", 100*time.Millisecond, "taken off every RLQS assignment's time to live for its trip to Envoy")
	fs.StringVar(&c.grpcAddr, "grpc-addr", "", "serve Envoy's rate limit service (gRPC, envoy.service.ratelimit.v3) and gRPC health on this address; off by default")
	c.rlsOpt.flags(fs)
	c.grpcBounds.flags(fs)
	c.budgetCaps.flags(fs)
	c.gub.flags(fs)
	fs.StringVar(&c.pprofAddr, "pprof-addr", "", "serve Go's net/http/pprof on this address (e.g. 127.0.0.1:6060) for profiling; off by default")
	c.sec.flags(fs)
	c.httpLimits.flags(fs)
	c.region.flags(fs)
	fs.String(configFlag, "", "YAML file of serve settings, flag names as keys (http-addr: 0.0.0.0:8080, join: [a, b]); the command line and then $RLNODE_<FLAG> (e.g. $RLNODE_HTTP_ADDR) override it (default $RLNODE_CONFIG)")
	return fs, c
}

// validate reports every problem at once, in words that say how to fix it.
func (c *serveConfig) validate() error {
	errs := []error{c.gub.validate()}
	if c.limit < 1 {
		errs = append(errs, fmt.Errorf("--limit %d: must be at least 1", c.limit))
	}
	if c.window <= 0 {
		errs = append(errs, fmt.Errorf("--window %s: must be a positive duration such as 60s", c.window))
	} else if c.window < time.Millisecond {
		errs = append(errs, fmt.Errorf("--window %s: must be at least 1ms", c.window))
	}
	if c.dataDir == "" {
		errs = append(errs, errors.New("--data-dir must not be empty"))
	}
	errs = append(errs, c.validateTuning()...)
	if c.rlqsLease < time.Millisecond || c.rlqsLease > lease.MaxLease || c.rlqsTransit < 0 || c.rlqsTransit >= c.rlqsLease {
		errs = append(errs, fmt.Errorf("--rlqs-lease %s / --rlqs-transit %s: the lease must be from 1ms to %s, the transit allowance from 0 to less than the lease", c.rlqsLease, c.rlqsTransit, lease.MaxLease))
	}
	errs = append(errs, c.grpcBounds.validate()...)
	errs = append(errs, c.budgetCaps.validate()...)
	if _, err := storage.ParseKind(c.raftLog); err != nil {
		errs = append(errs, fmt.Errorf("--raft-log %q: want wal or bolt", c.raftLog))
	}
	if c.waitForJoin && c.join != "" {
		errs = append(errs, errors.New("--wait-for-join and --join exclude each other: --join asks to be added, --wait-for-join waits for an operator"))
	}
	if c.maxPermitTTL < time.Millisecond || c.maxPermitTTL > cluster.MaxPermitTTL {
		errs = append(errs, fmt.Errorf("--max-permit-ttl %s: want 1ms to %s", c.maxPermitTTL, cluster.MaxPermitTTL))
	}
	if t := c.rlsOpt.permitTTL; t < time.Millisecond || t > c.maxPermitTTL {
		errs = append(errs, fmt.Errorf("--rls-permit-ttl %s: want 1ms to --max-permit-ttl (%s)", t, c.maxPermitTTL))
	}
	if c.maxClockOffset <= 0 {
		errs = append(errs, fmt.Errorf("--max-clock-offset %s: must be positive", c.maxClockOffset))
	}
	if c.bootstrapExpect < 0 {
		errs = append(errs, fmt.Errorf("--bootstrap-expect %d: must be 0 (off) or the number of voters to start with", c.bootstrapExpect))
	}
	if c.bootstrapExpect > 0 && c.join == "" {
		errs = append(errs, errors.New("--bootstrap-expect needs --join: the HTTP addresses of all the nodes that form the cluster"))
	}
	if c.bootstrapExpect > 0 && c.waitForJoin {
		errs = append(errs, errors.New("--bootstrap-expect and --wait-for-join exclude each other"))
	}
	if c.rejoinEmpty && c.join == "" {
		errs = append(errs, errors.New("--rejoin-empty needs --join: the addresses of running members to rejoin through"))
	}
	errs = append(errs, c.validateAddrs()...)
	if t := c.raftTiming; t.LeaderLease <= 0 || t.LeaderLease > t.Heartbeat || t.Heartbeat > t.Election {
		errs = append(errs, fmt.Errorf("--raft-lease-timeout %s, --raft-heartbeat-timeout %s, --raft-election-timeout %s: need 0 < lease <= heartbeat <= election", t.LeaderLease, t.Heartbeat, t.Election))
	}
	if p, err := httpapi.ParseTrustedProxies(c.trustedProxies); err != nil {
		errs = append(errs, fmt.Errorf("--trusted-proxies: %w", err))
	} else {
		c.trusted = p
	}
	if hclog.LevelFromString(c.logLevel) == hclog.NoLevel {
		errs = append(errs, fmt.Errorf("--log-level %q: want trace, debug, info, warn or error", c.logLevel))
	}
	errs = append(errs, c.sec.validate(c.token)...)
	errs = append(errs, c.httpLimits.validate()...)
	errs = append(errs, c.region.validate()...)
	return errors.Join(errs...)
}

// validateTuning checks the batching and Raft tuning flags.
func (c *serveConfig) validateTuning() []error {
	var errs []error
	for _, r := range []struct {
		flag      string
		v, lo, hi int
	}{
		{"--max-batch", c.maxBatch, 1, fsm.MaxHitsPerLog},
		{"--max-inflight", c.maxInflight, 1, 1 << 16},
		{"--max-forward-inflight", c.maxForwardInflight, 1, 1 << 16},
		{"--lease-hot-hits", c.leaseHotHits, 1, 1 << 30},
		{"--raft-max-append-entries", c.raftTuning.MaxAppendEntries, 1, 1024},
		{"--raft-max-rpcs-inflight", c.raftTuning.MaxRPCsInFlight, 1, 1 << 16},
	} {
		if r.v < r.lo || r.v > r.hi {
			errs = append(errs, fmt.Errorf("%s %d: must be %d..%d", r.flag, r.v, r.lo, r.hi))
		}
	}
	return errs
}

// validateAddrs checks the listen and advertise addresses and the id, and
// fills in their defaults.
func (c *serveConfig) validateAddrs() []error {
	var errs []error
	if c.httpAdvertise == "" {
		c.httpAdvertise = c.httpAddr
	}
	if c.raftAdvertise == "" {
		c.raftAdvertise = c.raftAddr
	}
	for _, a := range []struct{ flag, v string }{{"--http-addr", c.httpAddr}, {"--raft-addr", c.raftAddr}} {
		if _, _, err := net.SplitHostPort(a.v); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: want host:port", a.flag, a.v))
		}
	}
	for _, a := range []struct{ flag, v string }{{"--http-advertise", c.httpAdvertise}, {"--raft-advertise", c.raftAdvertise}} {
		host, _, err := net.SplitHostPort(a.v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %q: want host:port", a.flag, a.v))
			continue
		}
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			errs = append(errs, fmt.Errorf("%s %q: other nodes cannot dial an unspecified address; set %s to this node's reachable address", a.flag, a.v, a.flag))
		}
	}
	if c.id == "" {
		c.id = c.raftAdvertise
	}
	// The id and addresses go into the replicated log: one the state
	// machine would refuse must never get that far.
	if err := fsm.ValidateNode(fsm.Node{ID: c.id, RaftAddr: c.raftAdvertise, HTTPAddr: c.httpAdvertise}); err != nil {
		errs = append(errs, fmt.Errorf("--id, --raft-advertise or --http-advertise (default: the --*-addr): %w", err))
	}
	return errs
}

func (c *serveConfig) joinAddrs() []string {
	return splitList(c.join)
}

// parseServe reads and checks serve's flags.
func parseServe(args []string, help io.Writer) (*serveConfig, error) {
	fs, c := serveFlags(help)
	if err := cli.Parse(fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, &cli.UsageError{Err: fmt.Errorf("unexpected arguments %q (serve takes flags only)", fs.Args()), Hint: cli.Hint(fs)}
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	c.sec.tokenFlagGiven = explicit["cluster-token"]
	if err := applySettings(fs, explicit, os.LookupEnv); err != nil {
		return nil, usageErr("%v", err)
	}
	if err := c.validate(); err != nil {
		return nil, cli.Errorf("invalid configuration:\n  %s", strings.ReplaceAll(err.Error(), "\n", "\n  "))
	}
	return c, nil
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseServe(args, stdout)
	if err != nil {
		return err
	}
	tlsSrc, err := c.loadSecurity()
	if err != nil {
		return err
	}
	seed, err := c.seed()
	if err != nil {
		return cli.Errorf("--policies: %w", err)
	}
	logger := hclog.New(&hclog.LoggerOptions{
		Name: "rlnode", Level: hclog.LevelFromString(c.logLevel), JSONFormat: c.logJSON, Output: stderr,
	}).With("node", c.id)

	soft, hard, err := raiseFileLimit()
	if err != nil {
		logger.Warn("could not raise the file descriptor limit", "error", err)
	}
	// The rate limit service and the quota service share the gRPC budget.
	c.fds = planFDs(soft, hard, c.sec.raftLimits, c.grpcAddr != "" || c.rlqsAddr != "" || c.gub.addr != "", c.httpLimits.maxConns)
	c.fds.log(logger, c.grpcAddr != "" || c.rlqsAddr != "" || c.gub.addr != "")

	// Bind every port first: a busy one should fail before any Raft state
	// is touched.
	ln, capped, err := c.bindHTTP(tlsSrc)
	if err != nil {
		return err
	}
	defer ln.Close()
	side, err := c.bindSideListeners()
	if err != nil {
		return err
	}
	defer side.close()

	reg := prometheus.NewRegistry()
	obs := metrics.New(reg)
	obs.BuildInfo(releaseVersion(), uint32(fsm.CurrentFormat), uint32(fsm.OldestFormat))
	if err := exportRaftMetrics(reg); err != nil {
		logger.Warn("raft metrics unavailable", "error", err)
	}

	// Tracing is off unless an OTLP endpoint is in the environment.
	tr, err := tracing.FromEnv(ctx, c.id)
	if err != nil {
		return cli.Errorf("tracing: %w", err)
	}
	defer flushTraces(tr, logger)
	if tr != nil {
		logger.Info("exporting traces", "otlp", tr.Exporter)
	}

	fatal := make(chan error, 1)
	cfg := c.clusterConfig(seed, tlsSrc, logger, obs)
	cfg.TracerProvider, cfg.Propagator = tr.TracerProvider(), tr.TextMapPropagator()
	cfg.OnFatal = func(err error) {
		select {
		case fatal <- err:
		default:
		}
	}
	if err := c.rejoinIfNotMember(cfg, logger); err != nil {
		return err
	}
	node, err := cluster.Open(cfg)
	if err != nil {
		return err
	}
	obs.WatchNode(node)
	obs.WatchDisk(node.Views())
	obs.WatchPermits(node.Budgets())
	warnCtx, stopWarn := context.WithCancel(ctx)
	defer stopWarn()
	go reportDefaultPolicy(warnCtx, node, seed, logger)
	gubSvc := gubernatorService(node, obs)
	holder, err := c.region.holder(node, tlsSrc, logger)
	if err != nil {
		return err
	}
	api := httpapi.New(httpapi.Config{Node: node, Budgets: node.Budgets(), Token: c.token, DebugEndpoints: c.debugEndpoints, Logger: logger.Named("http"), Metrics: obs, LeaseMetrics: obs, MetricsHandler: obs.Handler(),
		TrustedProxies: c.trusted, Headers: c.headers, Middleware: tr.Gin(), Region: c.region.name, Parent: c.region.parent, RegionView: c.region.statusView(holder, node),
		Gubernator: gubapi.NewGateway(gubSvc)})
	defer c.region.start(holder, obs, logger)()
	// The public API, and the node-to-node endpoints the cluster serves
	// itself.
	srv := httpapi.NewServer(node.Mount(api.Handler()), logger, c.httpLimits.bodyBudget)
	srv.ConnState = capped.ConnState

	// The limits are the replicated policy table's, said once the node is
	// ready (reportDefaultPolicy), never this node's seeding flags.
	logger.Info("rlnode serving", "http", ln.Addr().String(), "raft", c.raftAddr, "data_dir", c.dataDir)
	if c.waitForJoin && !node.HadState() {
		logger.Info(node.Status().Waiting)
	}
	c.warnSecurity(logger, tlsSrc)
	if c.debugEndpoints || c.debugClockOffset != 0 {
		logger.Warn("debug clock controls are enabled; never use them in production", "offset", c.debugClockOffset)
	}

	stopPprof, grpcSrv := c.startSideServers(side, node, obs, tlsSrc, tr.GRPC(), logger)
	defer stopPprof()
	if side.gub != nil {
		grpcSrv = c.startGubernator(grpcSrv, side.gub, gubSvc, node, obs, tlsSrc, tr.GRPC(), logger)
	}

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	reloadCtx, stopReload := context.WithCancel(context.Background())
	reloadDone := make(chan struct{})
	go func() {
		defer close(reloadDone)
		reloadTLS(reloadCtx, tlsSrc, c.sec.tlsReload, logger.Named("tls"))
	}()
	defer func() { stopReload(); <-reloadDone }()

	joinCtx, cancelJoin := context.WithCancel(ctx)
	joinDone := c.joinInBackground(joinCtx, node, logger)

	runErr := waitForStop(ctx, logger, fatal, grpcSrv.done(), serveErr, joinDone)
	cancelJoin()
	return c.shutdown(runErr, node, api, srv, grpcSrv, logger)
}

// Caps on the public listeners' open connections, lowered to fit a small
// descriptor limit (fdlimit.go), leaving room for the Raft port, stores,
// snapshots and TLS reloads: a flood of sockets meets a cap, not EMFILE.
// HTTP's are flags (httpLimits; maxHTTPConns is the default total). Envoy keeps a
// few connections per worker to the rate limit service, so one address may
// hold a quarter of the gRPC slots and a flood from one host cannot lock
// the others out. Silent connections go after 5 s on both ports (HTTP's
// ReadHeaderTimeout, rls.HandshakeTimeout).
const (
	maxHTTPConns      = 8192
	maxGRPCConns      = 4096
	maxGRPCConnsPerIP = 1024
)

// sideListeners are the listeners beside the HTTP API that flags ask for
// (nil when off). Like HTTP's, they are bound before any Raft state is
// touched: a busy port must not leave behind a bootstrapped data dir.
type sideListeners struct{ pprof, grpc, rlqs, gub net.Listener }

func (c *serveConfig) bindSideListeners() (sideListeners, error) {
	var s sideListeners
	var err error
	if c.pprofAddr != "" {
		if s.pprof, err = net.Listen("tcp", c.pprofAddr); err != nil {
			return sideListeners{}, fmt.Errorf("listen for pprof on %s: %w", c.pprofAddr, err)
		}
	}
	if c.grpcAddr != "" {
		if s.grpc, err = net.Listen("tcp", c.grpcAddr); err != nil {
			s.close()
			return sideListeners{}, fmt.Errorf("listen for gRPC on %s: %w", c.grpcAddr, err)
		}
		rls := c.fds.grpc
		if c.rlqsAddr != "" {
			rls = max(1, rls/2) // shared with the quota service
		}
		s.grpc = connlimit.Wrap(c.refuseHTTPOnGRPC(s.grpc, "Envoy's rate limit service"), rls, min(maxGRPCConnsPerIP, rls))
	}
	if c.rlqsAddr != "" {
		if s.rlqs, err = net.Listen("tcp", c.rlqsAddr); err != nil {
			s.close()
			return sideListeners{}, fmt.Errorf("listen for RLQS on %s: %w", c.rlqsAddr, err)
		}
		quota := c.fds.grpc
		if c.grpcAddr != "" {
			quota = max(1, quota/2) // shared with the rate limit service
		}
		s.rlqs = connlimit.Wrap(c.refuseHTTPOnGRPC(s.rlqs, "Envoy's rate limit quota service"), quota, min(maxGRPCConnsPerIP, quota))
	}
	if s.gub, err = c.bindGubernator(); err != nil {
		s.close()
		return sideListeners{}, err
	}
	return s, nil
}

// close releases listeners no server took over (closing one a server
// already closed does nothing).
func (s sideListeners) close() {
	for _, ln := range []net.Listener{s.pprof, s.grpc, s.rlqs, s.gub} {
		if ln != nil {
			ln.Close()
		}
	}
}

// bindHTTP listens on --http-addr, capped and behind TLS when configured;
// the server reports connection states to capped.
func (c *serveConfig) bindHTTP(tlsSrc *tlsconf.Source) (ln net.Listener, capped *connlimit.KeepAlive, err error) {
	raw, err := net.Listen("tcp", c.httpAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen for HTTP on %s: %w", c.httpAddr, err)
	}
	total := min(c.httpLimits.maxConns, c.fds.http)
	capped = connlimit.NewKeepAlive(c.refuseGRPCOnHTTP(raw), total, min(c.httpLimits.maxConnsPerIP, total))
	ln = capped
	if tlsSrc != nil {
		ln = tls.NewListener(ln, tlsSrc.ServerConfig())
	}
	return ln, capped, nil
}

// startSideServers serves pprof and Envoy's rate-limit service over gRPC
// on the listeners bound for them. stopPprof is never nil.
func (c *serveConfig) startSideServers(side sideListeners, node *cluster.Node, obs *metrics.Metrics, tlsSrc *tlsconf.Source, grpcOpts []grpc.ServerOption, logger hclog.Logger) (stopPprof func(), grpcSrv *grpcServer) {
	stopPprof = func() {}
	if side.pprof != nil {
		stopPprof = servePprof(side.pprof, logger)
	}
	if side.grpc != nil {
		rc := rls.Config{Limiter: node, Permits: node.Budgets(), Token: c.token, Logger: logger.Named("rls"), Observer: obs,
			Limits: c.grpcBounds.limits(), Refused: obs, ServerOptions: grpcOpts}
		c.rlsOpt.apply(&rc)
		if tlsSrc != nil {
			rc.TLS = tlsSrc.ServerConfig("h2")
		}
		grpcSrv = startGRPC(side.grpc, rc, logger)
		obs.WatchGRPCPort("rls", grpcSrv.srv.OpenCalls, nil)
	}
	if side.rlqs != nil {
		qc := rlqs.Config{Node: node, Token: c.token, Lease: c.rlqsLease, Transit: c.rlqsTransit,
			Logger: logger.Named("rlqs"), Observer: obs, Limits: c.grpcBounds.rlqsLimits(), Refused: obs,
			StreamIdle: c.grpcBounds.rlqsIdle, GrantRate: c.grpcBounds.rlqsGrantRate,
			NodeBuckets: c.grpcBounds.rlqsBuckets, CredentialBuckets: c.grpcBounds.rlqsCredBuckets,
			ServerOptions: grpcOpts}
		if tlsSrc != nil {
			qc.TLS = tlsSrc.ServerConfig("h2")
		}
		grpcSrv = startRLQS(grpcSrv, side.rlqs, qc, logger)
		obs.WatchGRPCPort("rlqs", grpcSrv.quota.OpenStreams, grpcSrv.quota.Buckets)
	}
	return stopPprof, grpcSrv
}

// flushTraces exports the spans still buffered when the node stops.
func flushTraces(tr *tracing.Tracing, logger hclog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		logger.Warn("traces lost at shutdown", "error", err)
	}
}

// waitForStop returns when the node should stop: nil on a signal (ctx),
// else why it cannot go on.
func waitForStop(ctx context.Context, logger hclog.Logger, fatal, grpcDone, httpDone, joined <-chan error) error {
	for {
		select {
		case <-ctx.Done():
			logger.Info("shutting down")
			return nil
		case err := <-fatal:
			return fmt.Errorf("stopping: %w", err)
		case err := <-grpcDone:
			return fmt.Errorf("grpc server: %w", err)
		case err := <-httpDone:
			return fmt.Errorf("http server: %w", err)
		case err := <-joined:
			// A failed join ends the node; a successful one just stops
			// being watched.
			if err != nil {
				return err
			}
			joined = nil
		}
	}
}

// clusterConfig is the node's configuration from the flags.
func (c *serveConfig) clusterConfig(seed []policy.Policy, tlsSrc *tlsconf.Source, logger hclog.Logger, obs cluster.Observer) cluster.Config {
	return cluster.Config{
		ID: c.id, RaftBind: c.raftAddr, RaftAdvertise: c.raftAdvertise, HTTPAdvertise: c.httpAdvertise,
		DataDir: c.dataDir, RaftLog: storage.Kind(c.raftLog), Bootstrap: c.join == "" && !c.waitForJoin,
		Version: releaseVersion(), RejoinEmpty: c.rejoinEmpty, JoinCatchupTimeout: c.joinCatchupTimeout, BootstrapExpect: c.bootstrapExpect, MaxClockOffset: c.maxClockOffset, JoinAddrs: c.joinAddrs(), MaxPermitTTL: c.maxPermitTTL,
		CredentialCaps:    c.budgetCaps.caps(),
		Seed:              seed,
		SnapshotThreshold: c.snapshotThreshold, SnapshotInterval: c.snapshotInterval, TrailingLogs: c.trailingLogs,
		MaxBatch: c.maxBatch, MaxInflight: c.maxInflight, MaxForwardInflight: c.maxForwardInflight, LeaseHotHits: c.leaseHotHits, Timing: c.raftTiming,
		Raft:         cluster.RaftTuning{MaxAppendEntries: c.raftTuning.MaxAppendEntries, MaxRPCsInFlight: c.raftTuning.MaxRPCsInFlight, NoBatchApply: !c.raftBatchApply},
		ClusterToken: c.token, TLS: tlsSrc, RaftLimits: c.sec.raftLimits, ClockOffset: c.debugClockOffset,
		Logger: logger, Observer: obs, SliceWait: c.region.sliceWait, CallKeys: c.gub.bounds(),
	}
}

// rejoinIfNotMember: a node restarted with --join on a data dir that
// holds state asks the cluster's leader whether it is still a member. If
// the leader (confirmed by a quorum) says its configuration does not name
// this node, the old state is moved aside (discarded-<time>/, nothing is
// deleted) and the node joins empty: a node removed while it was down, or
// one stuck on a configuration its cluster has left behind, comes back
// by restarting it. Without an answer (no leader now, nobody reachable)
// the state is kept, as before.
func (c *serveConfig) rejoinIfNotMember(cfg cluster.Config, logger hclog.Logger) error {
	addrs := c.joinAddrs()
	if len(addrs) == 0 {
		return nil
	}
	// With --bootstrap-expect too: once emptied, the node finds a listed
	// member with state and joins (BootstrapExpect), as a new pod does.
	if _, err := os.Stat(filepath.Join(c.dataDir, storage.IdentityFile)); err != nil {
		return nil // a new node: the join path handles it
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	view, err := cluster.AskLeader(ctx, addrs, c.id, cfg.ClusterToken, cfg.TLS)
	switch {
	case err != nil:
		logger.Info("node has Raft state; could not ask the cluster whether it is still a member, keeping the state", "join", c.join, "error", err)
		return nil
	case view.Member:
		if view.RaftAddr != c.raftAdvertise {
			logger.Warn("the leader names this node with another Raft address; keeping the state", "leader", view.Leader, "configured", view.RaftAddr, "advertised", c.raftAdvertise)
		}
		return nil
	}
	aside, err := storage.Discard(c.dataDir)
	if err != nil {
		return fmt.Errorf("the leader %s says this node is not a member; moving its state aside to rejoin: %w", view.Leader, err)
	}
	logger.Warn("the cluster's leader says this node is not a member: its old state was moved aside, joining empty through --join",
		"leader", view.Leader, "moved_to", aside, "join", c.join)
	return nil
}

// joinInBackground joins (or bootstraps with --bootstrap-expect) when
// --join names nodes and this node has no Raft state yet. The channel
// receives exactly one result and is buffered, so the goroutine ends even
// when nobody reads it; cancel ctx to give up.
func (c *serveConfig) joinInBackground(ctx context.Context, node *cluster.Node, logger hclog.Logger) chan error {
	done := make(chan error, 1)
	addrs := c.joinAddrs()
	if len(addrs) == 0 {
		done <- nil
		return done
	}
	go func() {
		if node.HadState() {
			logger.Info("node has Raft state; ignoring --join", "join", c.join)
			done <- nil
			return
		}
		self := cluster.JoinRequest{ID: c.id, RaftAddr: c.raftAdvertise, HTTPAddr: c.httpAdvertise, Rejoin: node.Rejoined()}
		if c.bootstrapExpect > 0 && !node.Rejoined() {
			done <- node.BootstrapExpect(ctx, addrs, logger.Info)
			return
		}
		logger.Info("no Raft state: asking the members in --join to add this node", "join", c.join)
		err := node.JoinAndWait(ctx, addrs, self, logger.Info)
		switch {
		case err == nil:
			logger.Info("joined the cluster as a voter", "via", c.join)
		case errors.Is(err, cluster.ErrNotMember):
			// Removed while joining: keep running, removed (the node
			// logged what to do), until an operator stops or re-adds it.
			logger.Info("stopped asking to join", "reason", err)
			err = nil
		}
		done <- err
	}()
	return done
}

// shutdown stops in order: fail readiness, leave if asked, stop accepting
// and drain gRPC and HTTP, then Raft, then the stores.
func (c *serveConfig) shutdown(runErr error, node *cluster.Node, api *httpapi.API, srv *http.Server, grpcSrv *grpcServer, logger hclog.Logger) error {
	api.SetDraining()
	sctx, cancel := context.WithTimeout(context.Background(), c.shutdownTimeout)
	defer cancel()
	if c.leaveOnShutdown && runErr == nil {
		if err := node.Leave(sctx); err != nil {
			logger.Warn("leave on shutdown failed", "error", err)
		} else {
			logger.Info("left the cluster")
		}
	}
	grpcSrv.stop(sctx)
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		logger.Warn("http shutdown", "error", err)
	}
	if err := node.Close(); err != nil {
		logger.Error("close node", "error", err)
		if runErr == nil {
			runErr = err
		}
	}
	if runErr == nil {
		logger.Info("stopped cleanly")
	}
	return runErr
}

// seed is the table this node writes if it bootstraps a new cluster: the
// --policies file, plus the default policy from --limit/--window unless the
// file defines one.
func (c *serveConfig) seed() ([]policy.Policy, error) {
	var ps []policy.Policy
	if c.policiesFile != "" {
		var err error
		if ps, err = policy.ReadFile(c.policiesFile); err != nil {
			return nil, err
		}
	}
	if err := c.region.seedable(c.policiesFile, ps); err != nil {
		return nil, err
	}
	for _, p := range ps {
		if p.Name == policy.Default {
			return ps, nil
		}
	}
	if len(ps) >= policy.MaxPolicies {
		return nil, fmt.Errorf("%s defines %d policies; with default from --limit/--window that is more than the %d the table holds", c.policiesFile, len(ps), policy.MaxPolicies)
	}
	return append(ps, policy.Fixed(policy.Default, c.limit, c.window)), nil
}

// reportDefaultPolicy logs once, when the node is first ready, the
// replicated default policy, and warns if it is not what this node's flags
// would have seeded: the flags only seed a new cluster, so a changed
// --limit on a running one does nothing, and the operator should know.
func reportDefaultPolicy(ctx context.Context, node *cluster.Node, seed []policy.Policy, logger hclog.Logger) {
	for deadline := time.Now().Add(time.Minute); node.Ready(0) != nil; {
		if time.Now().After(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	want := seed[len(seed)-1]
	for _, p := range seed {
		if p.Name == policy.Default {
			want = p
		}
	}
	have, ok := node.Policy(policy.Default)
	switch {
	case !ok:
		logger.Warn("the replicated table has no default policy: GET /check/{client} answers 404 until one is set (rlnode policy set default ...)")
	case have.Equal(want):
		logger.Info("policy default (replicated)", "policy", have.String())
	default:
		logger.Warn("this node's --limit/--window (or --policies) differ from the replicated default policy, which applies; change it with rlnode policy set",
			"flags", want.String(), "replicated", have.String())
	}
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// exportRaftMetrics routes hashicorp/raft's go-metrics (a process-wide sink
// by raft's design) into our registry.
func exportRaftMetrics(reg prometheus.Registerer) error {
	opts := gmprom.DefaultPrometheusOpts
	opts.Registerer = reg
	sink, err := gmprom.NewPrometheusSinkFrom(opts)
	if err != nil {
		return err
	}
	cfg := gometrics.DefaultConfig("rlnode")
	cfg.EnableHostname = false
	cfg.EnableRuntimeMetrics = false
	_, err = gometrics.NewGlobal(cfg, sink)
	return err
}
