package cluster

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/rlnode/rlnode/cluster/storage"
	"github.com/rlnode/rlnode/cluster/transport"
	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/policy"
	"github.com/rlnode/rlnode/tlsconf"
)

// Timing holds Raft's timeouts. Production uses DefaultTiming; tests use
// much shorter ones.
type Timing struct {
	Heartbeat, Election, LeaderLease, Commit time.Duration
}

// DefaultTiming is raft's own defaults but a longer lease: a leader keeps
// its lease through response delays of most of a second (an fsync stall, a
// loaded 2-core box running the load generator beside three nodes), which
// at the shorter settings we first tried made leaders step down under
// benchmark load. Failover after a crash still takes about 1-2 s.
var DefaultTiming = Timing{Heartbeat: time.Second, Election: time.Second, LeaderLease: 750 * time.Millisecond, Commit: 20 * time.Millisecond}

// RaftTuning holds hashicorp/raft's batching and pipelining knobs.
type RaftTuning struct {
	// MaxAppendEntries bounds the entries per AppendEntries RPC (and per
	// disk write on the leader).
	MaxAppendEntries int
	// MaxRPCsInFlight is the transport's pipelining depth to each
	// follower; 1 turns pipelining off.
	MaxRPCsInFlight int
	// NoBatchApply turns raft's BatchApplyCh off: entries queued while the
	// leader writes go to disk one at a time instead of together.
	NoBatchApply bool
}

// DefaultRaftTuning, measured on 3-node wal clusters with scripts/bench.sh
// (BENCH_VARIANTS, each variant its own cluster, repetitions interleaved
// with rotating order, medians; 2-core VM shared with other work, so only
// differences that hold across repetitions count):
//
//   - MaxRPCsInFlight 1 (raft's pipelining off) against raft's default 2:
//     at 256 workers 7639 vs 6204 hits/s (4 reps, 1 faster in 3) and in an
//     earlier 3-rep run faster in 3 of 3 (4791/4094, 4838/3031, 8026/6008);
//     p99 91.6 vs 117.5 ms. At 64 workers a tie (3924 vs 4559 median, each
//     faster in about half the pairs). With one entry in flight there is
//     nothing to pipeline; raft's own notes (hashicorp/raft#541) found
//     pipelining combines badly with batching. 8 was no better than 1.
//   - MaxAppendEntries 64, 256, 1024: 5153, 4153, 4391 at 64 workers and
//     5866, 5598, 5774 at 256, no order that held across repetitions: 256
//     stays.
//   - BatchApplyCh on vs off: on was faster in 3 of 3 at 64 workers in one
//     run, off faster in 3 of 3 at 256; in the next run off was faster in 3
//     of 4 at both but with the lower median at 64. Noise: it stays on (it
//     packs entries that queue behind a leader write into one disk write).
var DefaultRaftTuning = RaftTuning{MaxAppendEntries: 256, MaxRPCsInFlight: 1}

// Config configures a Node.
type Config struct {
	ID string
	// RaftBind is where the Raft listener binds; RaftAdvertise is what peers
	// dial (defaults to RaftBind).
	RaftBind, RaftAdvertise string
	// HTTPAdvertise is this node's HTTP address as peers reach it
	// (host:port); it is replicated so followers can forward to the leader.
	HTTPAdvertise string
	DataDir       string
	// RaftLog is the Raft log store: "" means what DataDir holds, or
	// storage.Default for a new dir; a kind that disagrees with DataDir is
	// refused.
	RaftLog storage.Kind
	// Bootstrap makes a node with no Raft state form a one-node cluster.
	Bootstrap bool
	// BootstrapExpect, when above zero, forms a cluster of that many
	// voters together with the nodes listed to BootstrapExpect (see
	// bootstrap.go) instead of bootstrapping alone.
	BootstrapExpect int
	// RejoinEmpty moves a data dir's lost or damaged state aside and
	// starts the node empty, to rejoin as a new member.
	RejoinEmpty bool
	// Seed is the policy table this node writes when, as leader, it finds
	// the replicated table never set (a new cluster, or one upgraded from
	// the release before policies). Afterwards policies change only
	// through the policy API.
	Seed []policy.Policy

	// SnapshotThreshold is how many log entries trigger a snapshot;
	// SnapshotInterval how often raft checks; TrailingLogs how many entries
	// stay behind a snapshot for slow followers.
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64
	Timing            Timing

	// ApplyTimeout bounds how long a hit waits to be queued into raft and,
	// for a forwarded hit, the whole forward including retries.
	ApplyTimeout time.Duration
	// NoLeaderWait is how long a hit waits for a leader to be known before
	// it is answered not-counted. An election normally settles well within
	// it; a node cut off from the majority stops holding callers.
	NoLeaderWait time.Duration
	// MaxBatch bounds hits per log entry; MaxInflight the number of entries
	// in flight at once (pipelining behind group commit). Measured on 3-node
	// clusters (scripts/bench.sh, BENCH_VARIANTS, 3 interleaved repetitions,
	// medians, 2-core VM shared with other work): on bolt at 64 workers, 1
	// in flight gave 8.7k hits/s, 2 gave 7.7k, 4 gave 7.3k, 16 gave 6.3k
	// (every entry in flight is its own Bolt commit). On wal, at 64 workers
	// 1 gave 4627, 2 gave 4275, 4 gave 4162 (1 fastest in 3 of 3
	// repetitions); at 256 workers 6416, 6833, 7475, within the noise
	// (repetitions spread 4966-7669). Again on an idle VM with wrk as the
	// client (6 interleaved repetitions of 5 s): 64 connections, 1 gave
	// 14,083/s and 2 gave 13,741/s; 256 connections 19,124 and 20,987; each
	// system's repetitions spread 11.6k-17.5k. So 1 stays.
	MaxBatch, MaxInflight int
	// MaxForwardInflight bounds the forwarding requests a follower has in
	// flight to the leader at once (its own group commit). 1, 2 and 4 were
	// within the noise through the followers at 64 connections (wrk, 8
	// interleaved repetitions of 5 s: medians 9.4k, 8.8k, 9.8k/s, each
	// spreading 6.4k-11.6k), so 4 stays. 1 carries 16 hits per forward
	// instead of 5 (a third of the forwarding requests) yet saved at most
	// 0.5 of ~10.5 CPU-s per 100k hits over the three nodes: the HTTP hop to
	// the leader is not what a forwarded hit costs most (serving the
	// caller's request on a second node is), so a cheaper forwarding
	// protocol than one HTTP request per batch would gain little.
	MaxForwardInflight int
	// LeaseHotHits: a key of a leased policy seen this many times in the
	// current and previous second on this node is hot and decided from
	// leases this node holds (0: DefaultLeaseHotHits).
	LeaseHotHits int
	// MaxPermitTTL bounds the TTL a caller may give a permit or a
	// reservation on this node: how long a crashed holder can keep a slot
	// or an unsettled charge (0: the state machine's bound, MaxPermitTTL,
	// 1h; more is invalid).
	MaxPermitTTL time.Duration
	// CredentialCaps bound the permits and reservations one credential
	// may hold (zero fields: their defaults).
	CredentialCaps CredentialCaps
	// Raft is hashicorp/raft's batching and pipelining; zero values mean
	// DefaultRaftTuning's.
	Raft RaftTuning

	// JoinCatchupTimeout is how long a joining server may take to catch up
	// as a non-voter before the leader removes it again.
	JoinCatchupTimeout time.Duration

	// ClusterToken, when set, is sent on requests to peers and proven (never
	// sent) on every Raft connection.
	ClusterToken string
	// TLS, when set, secures the Raft port and requests to peers; with a CA,
	// both ends present certificates signed by it.
	TLS *tlsconf.Source
	// RaftLimits bound Raft connections (zero values: defaults).
	RaftLimits transport.RaftLimits
	// MaxClockOffset is how far this node's clock may be from the
	// majority of the cluster's before it refuses to lead.
	MaxClockOffset time.Duration
	// JoinAddrs are the HTTP addresses given to --join. The clock check
	// reads them when a voter's HTTP address is not known yet (a cluster
	// restarted before its first snapshot, on data dirs without
	// peer-http.json), so such a restart can still elect a leader.
	JoinAddrs []string
	// SliceWait bounds how long a hit of a region's global policy waits
	// for a slice when the region holds none (0: 1s); then it fails with
	// ErrParentUnreachable, nothing counted.
	SliceWait time.Duration
	// ClockOffset skews this node's leader clock; testing only.
	ClockOffset time.Duration
	// Version is this node's release (cmd/rlnode's, set at build time),
	// reported to peers and in Status beside its format.
	Version string
	// Format is the log format this node reports to its peers for the
	// version gate and reads from its data dir; 0 means
	// fsm.CurrentFormat. Tests set an older one to stand in for a node
	// of an older release.
	Format fsm.Format

	Logger hclog.Logger
	// Stream replaces the TCP stream layer (a test harness wraps it to cut
	// links). Nil means transport.ListenTCP(RaftBind, RaftAdvertise).
	Stream raft.StreamLayer
	// PeerTransport replaces the HTTP transport used to reach other nodes
	// (a test harness wraps it to cut links). Nil means a pooled default.
	PeerTransport http.RoundTripper
	// Observer receives hit-path events (metrics); nil means none.
	Observer Observer
	// TracerProvider, when set, traces forwarding, leader operations,
	// grants and the wait for the commit (tracing.go); Propagator carries
	// the trace over the internal hop (default: W3C trace context). Nil
	// means off, at no cost.
	TracerProvider trace.TracerProvider
	Propagator     propagation.TextMapPropagator
	// OnFatal is called when the node can no longer run safely (its state
	// machine met an entry it cannot apply). Nil means log only.
	OnFatal func(error)
	// CallKeys bounds the stored per-call keys (gubernator's API) while
	// this node leads; zero means DefaultCallKeys and
	// DefaultCallKeysPerCredential.
	CallKeys CallKeyBounds
}

func (c *Config) setDefaults() {
	if c.RaftAdvertise == "" {
		c.RaftAdvertise = c.RaftBind
	}
	if c.ID == "" {
		c.ID = c.RaftAdvertise
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = 8192
	}
	if c.SnapshotInterval == 0 {
		c.SnapshotInterval = 30 * time.Second
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = 2048
	}
	if c.Timing == (Timing{}) {
		c.Timing = DefaultTiming
	}
	if c.ApplyTimeout == 0 {
		c.ApplyTimeout = 3 * time.Second
	}
	if c.SliceWait <= 0 {
		c.SliceWait = time.Second
	}
	if c.NoLeaderWait == 0 {
		c.NoLeaderWait = time.Second
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = 512
	}
	if c.MaxInflight == 0 {
		c.MaxInflight = 1
	}
	if c.MaxClockOffset == 0 {
		c.MaxClockOffset = 500 * time.Millisecond
	}
	if c.JoinCatchupTimeout == 0 {
		c.JoinCatchupTimeout = 2 * time.Minute
	}
	if c.LeaseHotHits == 0 {
		c.LeaseHotHits = DefaultLeaseHotHits
	}
	if c.MaxPermitTTL == 0 {
		c.MaxPermitTTL = MaxPermitTTL
	}
	if c.MaxForwardInflight == 0 {
		c.MaxForwardInflight = 4
	}
	if c.Raft.MaxAppendEntries == 0 {
		c.Raft.MaxAppendEntries = DefaultRaftTuning.MaxAppendEntries
	}
	if c.Raft.MaxRPCsInFlight == 0 {
		c.Raft.MaxRPCsInFlight = DefaultRaftTuning.MaxRPCsInFlight
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.Observer == nil {
		c.Observer = nopObserver{}
	}
}

// Validate checks the configuration after defaults are applied.
func (c *Config) Validate() error {
	c.setDefaults()
	var errs []error
	if c.MaxPermitTTL < time.Millisecond || c.MaxPermitTTL > MaxPermitTTL {
		errs = append(errs, fmt.Errorf("max permit TTL %s: want 1ms to %s", c.MaxPermitTTL, MaxPermitTTL))
	}
	if err := c.CredentialCaps.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("data dir is empty"))
	}
	if c.RaftBind == "" && c.Stream == nil {
		errs = append(errs, errors.New("raft address is empty"))
	}
	if c.HTTPAdvertise == "" {
		errs = append(errs, errors.New("http advertise address is empty"))
	}
	if c.ID != "" {
		// The id goes into the log: one its decoder refuses would halt
		// every replica.
		if err := fsm.ValidateNode(fsm.Node{ID: c.ID, HTTPAddr: c.HTTPAdvertise}); err != nil {
			errs = append(errs, err)
		}
	}
	seen := map[string]bool{}
	for _, p := range c.Seed {
		if err := p.Validate(); err != nil {
			errs = append(errs, err)
		}
		if seen[p.Name] {
			errs = append(errs, fmt.Errorf("policy %q defined twice", p.Name))
		}
		seen[p.Name] = true
	}
	if c.MaxBatch < 1 || c.MaxBatch > fsm.MaxHitsPerLog {
		errs = append(errs, fmt.Errorf("max batch %d must be 1..%d", c.MaxBatch, fsm.MaxHitsPerLog))
	}
	if c.Raft.MaxAppendEntries < 1 || c.Raft.MaxAppendEntries > 1024 {
		errs = append(errs, fmt.Errorf("raft max append entries %d must be 1..1024", c.Raft.MaxAppendEntries))
	}
	if c.Raft.MaxRPCsInFlight < 1 {
		errs = append(errs, fmt.Errorf("raft max RPCs in flight %d must be at least 1", c.Raft.MaxRPCsInFlight))
	}
	if c.MaxInflight < 1 {
		errs = append(errs, fmt.Errorf("max inflight %d must be at least 1", c.MaxInflight))
	}
	t := c.Timing
	if !(t.LeaderLease <= t.Heartbeat && t.Heartbeat <= t.Election) || t.LeaderLease <= 0 {
		errs = append(errs, fmt.Errorf("raft timing %+v: need 0 < lease <= heartbeat <= election", t))
	}
	return errors.Join(errs...)
}

// Observer receives hit-path events for metrics. Calls are synchronous and
// must be cheap.
type Observer interface {
	// BatchApplied is called with the number of hits in each entry this
	// node writes as leader.
	BatchApplied(hits int)
	// Forwarded is called with the number of hits this node sends to the
	// leader in one forwarding request.
	Forwarded(hits int)
	// ForwardServed is called for each forwarded batch this node serves as
	// leader.
	ForwardServed()
}

type nopObserver struct{}

func (nopObserver) BatchApplied(int) {}
func (nopObserver) Forwarded(int)    {}
func (nopObserver) ForwardServed()   {}

// LeaseObserver receives lease events per policy; an Observer that also
// implements it gets them (metrics). Units are what this node lent as
// leader (granted, returned) or, as a holder, decided from memory and let
// expire unspent.
type LeaseObserver interface {
	LeaseGranted(policy string, units int64)
	LeaseReturned(policy string, units int64)
	LeaseExpired(policy string, units int64)
	DecidedLocally(policy string, hits int)
	// DecidedThroughLog counts hits of leased policies this node could not
	// decide from a lease (a cold key, a grant not yet here, a budget
	// being rechecked) and sent through the log: its own entries on the
	// leader, forwarded on a follower. With DecidedLocally it is the share
	// of leased hits each node decides alone.
	DecidedThroughLog(policy string, hits int)
}

type nopLeaseObserver struct{}

func (nopLeaseObserver) LeaseGranted(string, int64)    {}
func (nopLeaseObserver) LeaseReturned(string, int64)   {}
func (nopLeaseObserver) LeaseExpired(string, int64)    {}
func (nopLeaseObserver) DecidedLocally(string, int)    {}
func (nopLeaseObserver) DecidedThroughLog(string, int) {}

func leaseObserver(o Observer) LeaseObserver {
	if lo, ok := o.(LeaseObserver); ok {
		return lo
	}
	return nopLeaseObserver{}
}
