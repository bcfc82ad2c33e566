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
	// ErrNotMember: this node is not (any longer) a member of the cluster
	// (it was removed, or the leader refused it as a non-member), so it
	// decides nothing and forwards nothing. Nothing was counted; another
	// node can answer.
	ErrNotMember = errors.New("not a member of the cluster")
	// ErrTableChanged marks a whole-table policy write the leader refused
	// before the log because the table is no longer the version the write
	// was computed from: nothing changed; read the table again, redo the
	// change on it and write again.
	ErrTableChanged = errors.New("the policy table changed since it was read")
)

// HitError is why a hit (one all-or-nothing group of a check) failed: its
// outcome, the reason a caller acts on, and the cause in words. Every
// failure of the hit path is one; errors.Is matches its outcome
// (ErrNotCounted or ErrOutcomeUnknown), its reason and its cause.
type HitError struct {
	// Outcome is ErrNotCounted or ErrOutcomeUnknown.
	Outcome error
	// Reason, when set, is ErrNoLeader (no leader known), ErrNotLeader
	// (the node asked does not lead, or lost leadership before the entry
	// was appended) or ErrNotMember (this node was removed): what a front
	// end names in its answer.
	Reason error
	// Cause is what failed, for the caller to read; nil when Reason says
	// it all.
	Cause error
}

func notCounted(reason, cause error) *HitError {
	return &HitError{Outcome: ErrNotCounted, Reason: reason, Cause: cause}
}

func outcomeUnknown(cause error) *HitError {
	return &HitError{Outcome: ErrOutcomeUnknown, Cause: cause}
}

func (e *HitError) Error() string {
	if why := e.Why(); why != "" {
		return e.Outcome.Error() + ": " + why
	}
	return e.Outcome.Error()
}

// Why is the reason and the cause in words, without the outcome: what a
// front end adds to its own sentence about the outcome.
func (e *HitError) Why() string {
	switch {
	case e.Reason != nil && e.Cause != nil:
		return e.Reason.Error() + ": " + e.Cause.Error()
	case e.Reason != nil:
		return e.Reason.Error()
	case e.Cause != nil:
		return e.Cause.Error()
	}
	return ""
}

// Unwrap lets errors.Is and errors.As see the outcome, the reason and
// the cause.
func (e *HitError) Unwrap() []error {
	errs := []error{e.Outcome}
	if e.Reason != nil {
		errs = append(errs, e.Reason)
	}
	if e.Cause != nil {
		errs = append(errs, e.Cause)
	}
	return errs
}

// classifyApply maps a failed raft apply onto the two hit failures: raft
// returns ErrNotLeader, ErrEnqueueTimeout and ErrLeadershipTransferInProgress
// before the entry is appended, so those were never counted.
func classifyApply(err error) *HitError {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return notCounted(ErrNotLeader, err)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return notCounted(nil, err)
	default:
		return outcomeUnknown(err)
	}
}
