package cluster

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/cluster/raftlog"
	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/tlsconf"
)

// Policy is a named budget: Limit hits (of cost 1) per Window.
type Policy struct {
	Name   string
	Limit  int64
	Window time.Duration
}

// Validate says what is wrong with a policy in words an operator can act on.
func (p Policy) Validate() error {
	if p.Name == "" || len(p.Name) > fsm.MaxPolicyLen {
		return fmt.Errorf("policy name %q must be 1 to %d bytes", p.Name, fsm.MaxPolicyLen)
	}
	if p.Limit < 1 || p.Limit > fsm.MaxLimit {
		return fmt.Errorf("policy %q: limit %d must be between 1 and %d", p.Name, p.Limit, int64(fsm.MaxLimit))
	}
	if p.Window < time.Millisecond || p.Window.Milliseconds() > fsm.MaxWindowMs {
		return fmt.Errorf("policy %q: window %s must be between 1ms and 366 days", p.Name, p.Window)
	}
	return nil
}

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
	// raftlog.Default for a new dir; a kind that disagrees with DataDir is
	// refused.
	RaftLog raftlog.Kind
	// Bootstrap makes a node with no Raft state form a one-node cluster.
	Bootstrap bool
	// BootstrapExpect, when above zero, forms a cluster of that many
	// voters together with the nodes listed to BootstrapExpect (see
	// bootstrap.go) instead of bootstrapping alone.
	BootstrapExpect int
	// RejoinEmpty moves a data dir's lost or damaged state aside and
	// starts the node empty, to rejoin as a new member.
	RejoinEmpty bool
	Policies    []Policy

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
	// in flight at once (pipelining behind group commit). Measured on a
	// 3-node cluster at 64 workers (scripts/bench.sh): 1 in flight gave
	// 8.7k hits/s, 2 gave 7.7k, 4 gave 7.3k, 16 gave 6.3k. Every entry in
	// flight is its own Bolt commit (two fdatasyncs) on each node, so fewer,
	// fuller entries beat pipelining on an fsync-bound disk.
	MaxBatch, MaxInflight int
	// MaxForwardInflight bounds the forwarding requests a follower has in
	// flight to the leader at once (its own group commit).
	MaxForwardInflight int

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
	RaftLimits RaftLimits
	// MaxClockOffset is how far this node's clock may be from the
	// majority of the cluster's before it refuses to lead.
	MaxClockOffset time.Duration
	// ClockOffset skews this node's leader clock; testing only.
	ClockOffset time.Duration

	Logger hclog.Logger
	// Stream replaces the TCP stream layer (a test harness wraps it to cut
	// links). Nil means ListenTCP(RaftBind, RaftAdvertise).
	Stream raft.StreamLayer
	// PeerTransport replaces the HTTP transport used to reach other nodes
	// (a test harness wraps it to cut links). Nil means a pooled default.
	PeerTransport http.RoundTripper
	// Observer receives hit-path events (metrics); nil means none.
	Observer Observer
	// OnFatal is called when the node can no longer run safely (its state
	// machine met an entry it cannot apply). Nil means log only.
	OnFatal func(error)
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
	if c.MaxForwardInflight == 0 {
		c.MaxForwardInflight = 4
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
	if c.DataDir == "" {
		errs = append(errs, errors.New("data dir is empty"))
	}
	if c.RaftBind == "" && c.Stream == nil {
		errs = append(errs, errors.New("raft address is empty"))
	}
	if c.HTTPAdvertise == "" {
		errs = append(errs, errors.New("http advertise address is empty"))
	}
	if len(c.ID) > 256 {
		errs = append(errs, fmt.Errorf("node id is %d bytes, at most 256", len(c.ID)))
	}
	if len(c.Policies) == 0 {
		errs = append(errs, errors.New("no policy configured"))
	}
	seen := map[string]bool{}
	for _, p := range c.Policies {
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
}

type nopObserver struct{}

func (nopObserver) BatchApplied(int) {}
func (nopObserver) Forwarded(int)    {}
