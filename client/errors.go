package client

import (
	"errors"
	"fmt"
	"time"
)

// Errors a call can wrap; test with errors.Is. A refused hit is not an error
// (Result.Allowed is false); these are the calls that got no decision.
var (
	// ErrOutcomeUnknown: the hit may or may not have counted (the node lost
	// leadership mid-flight, the answer was lost, the call timed out after
	// the request was sent). The client never retries it by itself: a retry
	// can only over-count.
	ErrOutcomeUnknown = errors.New("rlnode: the hit may or may not have counted")
	// ErrNotCounted: the cluster certainly did not count the hit (no leader,
	// no node reachable, the node asked was removed from the cluster). The client has already retried on the other
	// nodes it knows until its timeout.
	ErrNotCounted = errors.New("rlnode: the hit was not counted")
	// ErrNoLeader: the cluster had no leader for the whole call (wraps
	// ErrNotCounted too).
	ErrNoLeader = errors.New("rlnode: the cluster has no leader")
	// ErrUnknownPolicy: the policy is not defined on the cluster.
	ErrUnknownPolicy = errors.New("rlnode: unknown policy")
	// ErrCostExceedsLimit: the cost is more than the policy could ever
	// allow; retrying is pointless.
	ErrCostExceedsLimit = errors.New("rlnode: cost exceeds the policy's limit")
	// ErrInvalid: the request was malformed (bad key, bad cost, too many
	// hits).
	ErrInvalid = errors.New("rlnode: invalid request")
	// ErrUnauthorized: the call needs the cluster token (Config.Token), or
	// the TLS handshake failed (certificate refused or not trusted); nothing
	// was counted.
	ErrUnauthorized = errors.New("rlnode: unauthorized")
)

// Error is an answer from a node that carried no decision. It matches the
// sentinel errors above with errors.Is.
type Error struct {
	// Status is the HTTP status (0 when no node answered).
	Status int
	// Code is rlnode's problem code, e.g. "outcome_unknown".
	Code string
	// Detail is the node's explanation.
	Detail string
	// Node is the address of the node that answered (or failed).
	Node string
	// RetryAfter is the node's Retry-After, if it sent one.
	RetryAfter time.Duration
	// kind is the sentinel this error matches.
	kind error
	// cause is the transport error, if any.
	cause error
	// hung: the node did not answer within the attempt budget; the call
	// went on to the next node.
	hung bool
}

func (e *Error) Error() string {
	switch {
	case e.Node == "" && e.cause != nil:
		return fmt.Sprintf("%v: %v", e.kind, e.cause)
	case e.Node == "":
		return fmt.Sprintf("%v: %s", e.kind, e.Detail)
	case e.Status == 0 && e.cause != nil:
		return fmt.Sprintf("%v: %s: %v", e.kind, e.Node, e.cause)
	case e.Detail != "":
		return fmt.Sprintf("%v: %s answered %d %s: %s", e.kind, e.Node, e.Status, e.Code, e.Detail)
	default:
		return fmt.Sprintf("%v: %s answered %d %s", e.kind, e.Node, e.Status, e.Code)
	}
}

// Is matches the sentinel this error stands for (and ErrNotCounted for
// ErrNoLeader).
func (e *Error) Is(target error) bool {
	if target == e.kind {
		return true
	}
	return target == ErrNotCounted && e.kind == ErrNoLeader
}

// Unwrap returns the transport error, if any.
func (e *Error) Unwrap() error { return e.cause }

// kindFor maps a problem code (and status) onto a sentinel.
func kindFor(status int, code string) error {
	switch code {
	case "outcome_unknown":
		return ErrOutcomeUnknown
	case "no_leader":
		return ErrNoLeader
	case "not_counted", "not_leader", "not_ready", "not_member":
		// not_member: the node asked was removed from the cluster;
		// nothing was counted and another node can answer.
		return ErrNotCounted
	case "unknown_policy":
		return ErrUnknownPolicy
	case "cost_exceeds_limit":
		return ErrCostExceedsLimit
	case "unauthorized":
		return ErrUnauthorized
	case "not_leased":
		return ErrNotLeased
	case "too_many_grants":
		return ErrTooManyGrants
	case "not_found":
		return ErrNotFound
	case "already_settled":
		return ErrAlreadySettled
	case "cluster_upgrading":
		return ErrClusterUpgrading
	case "wrong_policy":
		return ErrInvalid
	case "invalid_client", "invalid_request", "invalid_policy":
		return ErrInvalid
	}
	switch {
	case status == 401 || status == 403:
		return ErrUnauthorized
	case status == 404:
		return ErrUnknownPolicy
	case status == 422:
		return ErrCostExceedsLimit
	case status >= 400 && status < 500:
		return ErrInvalid
	}
	// An unexpected 5xx may have counted.
	return ErrOutcomeUnknown
}

// retryable reports whether a failed call certainly did not count, so it is
// safe to send it again to another node.
func retryable(err error) bool {
	var e *Error
	return errors.As(err, &e) && (e.kind == ErrNotCounted || e.kind == ErrNoLeader)
}
