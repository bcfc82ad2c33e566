// Package gubapi serves gubernator's V1 API (gRPC and its HTTP gateway)
// over an rlnode node: limits given per call, token and leaky buckets,
// independent batches of up to 1,000 items (DESIGN.md).
package gubapi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/gubapi/gubpb"
	"github.com/rlnode/rlnode/window"
)

// Limiter is what the service needs from the cluster.
type Limiter interface {
	Ready(wait time.Duration) error
	Peers() ([]cluster.Peer, error)
}

var _ Limiter = (*cluster.Node)(nil)

// Caller decides per-call items through the log: *cluster.Calls.
type Caller interface {
	Decide(ctx context.Context, req cluster.CallsRequest) (cluster.CallsAnswer, error)
}

var _ Caller = (*cluster.Calls)(nil)

// Observer records each item's result by name ("under_limit",
// "over_limit", "error", "full").
type Observer interface {
	GubernatorItem(name, result string)
}

// MaxBatch is gubernator's batch size: a request with more items is
// refused whole (OUT_OF_RANGE), as gubernator refuses it.
const MaxBatch = cluster.MaxCallsPerRequest

// The behaviour bits that change a decision. NO_BATCHING and
// MULTI_REGION change nothing here (DESIGN.md); GLOBAL lets the node
// answer from its leases, never over the limit.
const (
	behaviorGlobal         = int32(gubpb.Behavior_GLOBAL)
	behaviorGregorian      = int32(gubpb.Behavior_DURATION_IS_GREGORIAN)
	behaviorResetRemaining = int32(gubpb.Behavior_RESET_REMAINING)
	behaviorDrain          = int32(gubpb.Behavior_DRAIN_OVER_LIMIT)
)

// Service decides GetRateLimits requests; the gRPC server and the HTTP
// gateway share it.
type Service struct {
	limiter Limiter
	calls   Caller
	obs     Observer
	timeout time.Duration
}

// NewService returns a service over l and its calls (obs may be nil;
// timeout 0: 2 s).
func NewService(l Limiter, calls Caller, obs Observer, timeout time.Duration) *Service {
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	return &Service{limiter: l, calls: calls, obs: obs, timeout: timeout}
}

// itemError is gubernator's per-item answer to an item it cannot decide.
func itemError(msg string) *gubpb.RateLimitResp { return &gubpb.RateLimitResp{Error: msg} }

// toCall reads one item, or says why it cannot be decided (the texts of
// gubernator's own per-item errors where it has one).
func toCall(r *gubpb.RateLimitReq) (cluster.CallItem, string) {
	switch {
	case r.GetUniqueKey() == "":
		return cluster.CallItem{}, "field 'unique_key' cannot be empty"
	case r.GetName() == "":
		return cluster.CallItem{}, "field 'namespace' cannot be empty"
	}
	b := int32(r.GetBehavior())
	c := window.Call{Hits: r.GetHits(), Limit: r.GetLimit(), Duration: r.GetDuration(), Burst: r.GetBurst(),
		Gregorian: b&behaviorGregorian != 0, ResetRemaining: b&behaviorResetRemaining != 0, DrainOverLimit: b&behaviorDrain != 0}
	switch r.GetAlgorithm() {
	case gubpb.Algorithm_TOKEN_BUCKET:
		c.Alg = window.CallTokenBucket
	case gubpb.Algorithm_LEAKY_BUCKET:
		c.Alg = window.LeakyBucket
	default:
		return cluster.CallItem{}, fmt.Sprintf("Invalid rate limit algorithm '%d'", int32(r.GetAlgorithm()))
	}
	it := cluster.CallItem{Name: r.GetName(), Key: r.GetUniqueKey(), Call: c}
	if err := fsm.ValidateCallItem(it); err != nil {
		return cluster.CallItem{}, err.Error()
	}
	return it, ""
}

// GetRateLimits answers every item on its own: bad items get their error
// and the rest go to the cluster together, through one log entry. An
// error is a gRPC status (the whole batch failed: nothing or, for
// UNAVAILABLE with "may have counted", possibly everything counted).
func (s *Service) GetRateLimits(ctx context.Context, owner string, req *gubpb.GetRateLimitsReq) (*gubpb.GetRateLimitsResp, error) {
	if n := len(req.GetRequests()); n > MaxBatch {
		return nil, status.Errorf(codes.OutOfRange, "Requests.RateLimits list too large; max size is '%d'", MaxBatch)
	}
	out := &gubpb.GetRateLimitsResp{Responses: make([]*gubpb.RateLimitResp, len(req.GetRequests()))}
	items := make([]cluster.CallItem, 0, len(req.GetRequests()))
	global := make([]bool, 0, len(req.GetRequests()))
	at := make([]int, 0, len(req.GetRequests()))
	for i, r := range req.GetRequests() {
		it, bad := toCall(r)
		if bad != "" {
			out.Responses[i] = itemError(bad)
			s.observe(r.GetName(), "error")
			continue
		}
		items, at = append(items, it), append(at, i)
		global = append(global, int32(r.GetBehavior())&behaviorGlobal != 0)
	}
	if len(items) == 0 {
		return out, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	ans, err := s.calls.Decide(ctx, cluster.CallsRequest{Owner: owner, Items: items, Global: global})
	if err != nil {
		return nil, callsStatus(err)
	}
	for j, o := range ans.Items {
		i := at[j]
		out.Responses[i] = respOf(o)
		s.observe(items[j].Name, resultOf(o))
	}
	return out, nil
}

func respOf(o cluster.CallOutcome) *gubpb.RateLimitResp {
	switch {
	case o.Full:
		return itemError("too many rate limit keys stored for this credential or this cluster; reuse keys or wait for unused ones to expire (--gubernator-max-keys, --gubernator-max-keys-per-credential)")
	case o.Err != "":
		return itemError(o.Err)
	}
	r := &gubpb.RateLimitResp{Limit: o.Limit, Remaining: o.Remaining, ResetTime: o.Reset}
	if o.Over {
		r.Status = gubpb.Status_OVER_LIMIT
	}
	return r
}

func resultOf(o cluster.CallOutcome) string {
	switch {
	case o.Full:
		return "full"
	case o.Err != "":
		return "error"
	case o.Over:
		return "over_limit"
	}
	return "under_limit"
}

func (s *Service) observe(name, result string) {
	if s.obs != nil {
		s.obs.GubernatorItem(name, result)
	}
}

// callsStatus maps a failed batch to a gRPC status.
func callsStatus(err error) error {
	switch {
	case errors.Is(err, cluster.ErrClusterUpgrading):
		return status.Errorf(codes.FailedPrecondition, "cluster_upgrading: %v; nothing was counted", err)
	case errors.Is(err, cluster.ErrBadRequest):
		return status.Errorf(codes.InvalidArgument, "%v", err)
	case errors.Is(err, cluster.ErrNotCounted):
		return status.Errorf(codes.Unavailable, "not counted, safe to retry: %v", err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return status.Errorf(codes.DeadlineExceeded, "the items may have counted: %v", err)
	}
	return status.Errorf(codes.Unavailable, "the items may have counted: %v", err)
}

// readyWait is how long a health check waits for this node to apply
// what it knows is committed (as /readyz waits).
const readyWait = 200 * time.Millisecond

// HealthCheck is gubernator's health answer: "healthy" while this node can
// decide (it knows a leader), with the cluster's member count.
func (s *Service) HealthCheck() *gubpb.HealthCheckResp {
	r := &gubpb.HealthCheckResp{Status: "healthy"}
	if peers, err := s.limiter.Peers(); err == nil {
		r.PeerCount = int32(len(peers))
	}
	// As /readyz: a follower a moment behind its commit index is not
	// unhealthy.
	if err := s.limiter.Ready(readyWait); err != nil {
		r.Status, r.Message = "unhealthy", err.Error()
	}
	return r
}
