package cluster

import (
	"errors"

	"github.com/hashicorp/raft"
)

// The two ways a hit can fail mean different things to a caller, so every
// failure of the hit path wraps exactly one of them.
var (
	// ErrNotCounted: the hit certainly did not reach the log (no leader, the
	// leader could not be reached, the entry could not be queued). A retry
	// is safe.
	ErrNotCounted = errors.New("the hit was not counted")
	// ErrOutcomeUnknown: the hit reached the log or may have (apply timed
	// out, leadership lost mid-flight, the leader's answer was lost). It may
	// or may not have counted; a retry can only over-count.
	ErrOutcomeUnknown = errors.New("the hit may or may not have counted")
)

// Errors of the cluster API. raft's own errors are translated here so callers
// outside this package never see raft types.
var (
	// ErrNotLeader is returned by leader-only operations on a follower.
	ErrNotLeader = errors.New("this node is not the leader")
	// ErrNoLeader means no leader is known right now.
	ErrNoLeader = errors.New("no leader is known")
	// ErrUnknownPolicy is returned for a hit against a policy this node
	// does not define.
	ErrUnknownPolicy = errors.New("unknown policy")
	// ErrUnknownServer is returned when removing or transferring to an id
	// that is not a member.
	ErrUnknownServer = errors.New("no such server in the cluster")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("node is shut down")
	// ErrConflict marks an admin request the cluster's state refuses as
	// asked (a transfer to a non-voter or to a node whose clock is off):
	// nothing changed, and asking again unchanged will not help.
	ErrConflict = errors.New("refused in the cluster's current state")
)

// classifyApply maps a failed raft apply onto the two hit failures: raft
// returns ErrNotLeader, ErrEnqueueTimeout and ErrLeadershipTransferInProgress
// before the entry is appended, so those were never counted.
func classifyApply(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return errors.Join(ErrNotCounted, ErrNotLeader, err)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return errors.Join(ErrNotCounted, err)
	default:
		return errors.Join(ErrOutcomeUnknown, err)
	}
}
