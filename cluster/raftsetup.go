package cluster

import (
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/cluster/transport"
	"github.com/rlnode/rlnode/fsm"
)

// openTransport listens on the Raft port (unless the config brings its own
// stream layer) behind the token and TLS guard.
func (n *Node) openTransport() error {
	cfg := n.cfg
	stream := cfg.Stream
	if stream == nil {
		var err error
		if stream, err = transport.ListenTCP(cfg.RaftBind, cfg.RaftAdvertise); err != nil {
			return err
		}
	}
	stream = transport.GuardStream(stream, transport.RaftSecurity{TLS: cfg.TLS, Token: cfg.ClusterToken, RaftLimits: cfg.RaftLimits, HTTPAPI: BaseURL(cfg.HTTPAdvertise),
		Authorize: n.auth.authorize, Trusted: n.peerAddrs.trustedIP}, n.log.Named("raft-guard"))
	n.transport = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:          stream,
		MaxPool:         8,
		MaxRPCsInFlight: cfg.Raft.MaxRPCsInFlight,
		Timeout:         5 * time.Second,
		Logger:          n.log.Named("transport"),
	})
	return nil
}

// raftConfig is hashicorp/raft's configuration from the node's timing,
// snapshot and tuning settings.
func (n *Node) raftConfig() (*raft.Config, error) {
	cfg := n.cfg
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.Logger = newRaftLogger(n.log.Named("raft"))
	rc.HeartbeatTimeout = cfg.Timing.Heartbeat
	rc.ElectionTimeout = cfg.Timing.Election
	rc.LeaderLeaseTimeout = cfg.Timing.LeaderLease
	rc.CommitTimeout = cfg.Timing.Commit
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.TrailingLogs = cfg.TrailingLogs
	rc.NotifyCh = n.notifyCh
	// See DefaultRaftTuning for the measured choices.
	rc.BatchApplyCh = !cfg.Raft.NoBatchApply
	rc.MaxAppendEntries = cfg.Raft.MaxAppendEntries
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("raft config: %w", err)
	}
	return rc, nil
}

// apply proposes data as a log entry sealed with its checksum (see
// fsm.Sealed); every entry this node writes as leader goes through here.
// An entry the state machine would not decode is refused before it
// reaches the log: once committed, it would halt every replica at every
// restart.
func (n *Node) apply(data []byte, timeout time.Duration) raft.ApplyFuture {
	if err := fsm.CheckEntry(data); err != nil {
		return refusedFuture{fmt.Errorf("refused to write an entry the state machine cannot read: %w", err)}
	}
	return n.raft.ApplyLog(fsm.Sealed(data), timeout)
}

// awaitFuture waits for f, or until stop is closed. hashicorp/raft never
// resolves a future whose entry was committed but not yet applied when it
// shuts down, and a goroutine of the node waiting on one (seeding the
// policy table as a new leader while the state machine halts) held Close,
// and the process, forever. The node's own goroutines wait through it;
// request handlers, bounded by the HTTP server's shutdown, and the hits
// path, which should not pay a goroutine per entry, wait on the future. The
// helper goroutine ends when raft resolves f, or with the process.
func awaitFuture(f raft.Future, stop <-chan struct{}) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-stop:
		select {
		case err := <-done: // resolved as the node closed
			return err
		default:
			return ErrClosed
		}
	}
}

// refusedFuture is the answer for an entry apply did not propose: nothing
// was written.
type refusedFuture struct{ err error }

func (f refusedFuture) Error() error  { return f.err }
func (f refusedFuture) Index() uint64 { return 0 }
func (f refusedFuture) Response() any { return nil }
