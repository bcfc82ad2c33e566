package cluster

import (
	"context"
	"errors"
	"fmt"
)

// MaxIndependent is the most hits one independent check carries
// (gubernator's batch size, POST /v1/check with "independent": true).
const MaxIndependent = 1000

// CheckEach decides each hit on its own, as if each were a check of one:
// one hit refused takes nothing from the others. The hits are handed to
// the batcher together, so they share log entries (up to Config.MaxBatch
// hits each) with each other and with concurrent checks. Leased policies
// are decided through the log too (strict, exact). results[i] is the
// decision on hits[i] when errs[i] is nil; errs[i] is a *HitError
// (ErrNotCounted or ErrOutcomeUnknown) otherwise. An invalid hit fails
// alone, not counted.
func (n *Node) CheckEach(ctx context.Context, hits []Hit) (results []CheckResult, errs []error) {
	results, errs = make([]CheckResult, len(hits)), make([]error, len(hits))
	if len(hits) == 0 || len(hits) > MaxIndependent {
		err := notCounted(nil, fmt.Errorf("%d hits in one independent check: want 1 to %d", len(hits), MaxIndependent))
		for i := range errs {
			errs[i] = err
		}
		return results, errs
	}
	var groups []group
	var at []int
	for i, h := range hits {
		if err := h.Validate(); err != nil {
			errs[i] = notCounted(nil, err)
			continue
		}
		groups, at = append(groups, group{h}), append(at, i)
	}
	if len(groups) == 0 {
		return results, errs
	}
	var outs []outcome
	if n.IsLeader() {
		outs = n.leaderBatch.submit(ctx, groups...)
		// Lost the lead before they were queued: not counted, so they
		// go to whoever leads now.
		var again []int
		for j, o := range outs {
			if o.err != nil && errors.Is(o.err, ErrNotLeader) {
				again = append(again, j)
			}
		}
		if len(again) > 0 {
			retry := make([]group, len(again))
			for k, j := range again {
				retry[k] = groups[j]
			}
			for k, o := range n.fwdBatch.submit(ctx, retry...) {
				outs[again[k]] = o
			}
		}
	} else {
		outs = n.fwdBatch.submit(ctx, groups...)
	}
	for j, o := range outs {
		i := at[j]
		results[i], errs[i] = o.res, o.err
		if o.err == nil {
			if results[i].Decided == "" {
				results[i].Decided = DecidedLog
			}
			n.views.record(o.res)
		}
	}
	return results, errs
}
