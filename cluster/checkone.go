package cluster

import (
	"errors"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/policy"
	"github.com/rlnode/rlnode/window"
)

// ValidHit is a hit whose client id and policy name passed ValidateHit, so
// a front end validates once and CheckOne does not again. The zero value
// is not valid.
type ValidHit struct{ hit Hit }

// Hit returns the hit.
func (v ValidHit) Hit() Hit { return v.hit }

// InvalidHitError names the field of a hit that ValidateHit refused.
type InvalidHitError struct {
	Field string // "client" or "policy"
	Err   error
}

func (e *InvalidHitError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *InvalidHitError) Unwrap() error { return e.Err }

// ValidateHit checks a hit's client id (the log's rule) and policy name
// (the table's rule, stricter than the log's), in that order. The cost is
// checked by CheckOne, after the policy says whether it could ever be
// allowed.
func ValidateHit(policyName, client string, cost int64) (ValidHit, error) {
	if err := fsm.ValidateClient(client); err != nil {
		return ValidHit{}, &InvalidHitError{Field: "client", Err: err}
	}
	if err := policy.ValidateName(policyName); err != nil {
		return ValidHit{}, &InvalidHitError{Field: "policy", Err: err}
	}
	return ValidHit{Hit{Policy: policyName, Client: client, Cost: cost}}, nil
}

// OneResult is the decision on one hit, with what this node's table says
// of its policy, so a front end words its answer without asking again. It
// carries room for a local decision's slices: a caller that reuses one
// (a pool) decides a hot leased key without allocating. Its slices are
// valid until it is reused.
type OneResult struct {
	CheckResult
	// Policy is the hit's policy in this node's table, when Known.
	Policy policy.Policy
	Known  bool
	// NeverAllowed: this node's table shows that the cost exceeds the
	// capacity of Policy.Limits[Beyond]. Nothing was counted and no log
	// entry was written; CheckResult is empty. Nor is anything counted
	// for a concurrency policy (Policy.IsConcurrency: it takes permits).
	NeverAllowed bool
	Beyond       int

	buf resultBuf
}

// resultBuf is room for one hit's result and its limits' parts; the
// holder takes slices from it instead of allocating. A nil one, or a
// request beyond its room, allocates.
type resultBuf struct {
	hits  [1]HitResult
	parts [policy.MaxLimits]window.Result
	used  int
}

func (b *resultBuf) hitResults(n int) []HitResult {
	if b == nil || n > len(b.hits) {
		return make([]HitResult, n)
	}
	return b.hits[:n:n]
}

func (b *resultBuf) results(n int) []window.Result {
	if b == nil || b.used+n > len(b.parts) {
		return make([]window.Result, n)
	}
	s := b.parts[b.used : b.used+n : b.used+n]
	b.used += n
	return s
}

// errNotValidated answers a zero ValidHit.
var errNotValidated = errors.New("hit was not validated (cluster.ValidateHit)")
