package checker

import (
	"cmp"
	"fmt"
	"slices"
)

// Names of the per-call checks (gubernator's API), as they appear in
// Violation.Check.
const (
	CheckCallTokenOverLimit  = "percall-token-over-limit"
	CheckCallTokenWindows    = "percall-token-windows-overlap"
	CheckCallLeakyOverLimit  = "percall-leaky-over-limit"
	CheckCallAnswerMalformed = "percall-answer-malformed"
)

// CallOp is one per-call item (hits 1) as a client saw it. Times are ns
// since the run's start on the client's clock; ResetTime is the server's
// reset_time (Unix ms). Outcome is ok (Allowed says UNDER_LIMIT), unknown
// (the call failed after it may have reached the log), or fail.
type CallOp struct {
	ID             int     `json:"id"`
	Key            string  `json:"key"`
	Leaky          bool    `json:"leaky"`
	Invoke, Return int64   `json:"-"`
	Outcome        Outcome `json:"outcome"`
	Allowed        bool    `json:"allowed"`
	Remaining      int64   `json:"remaining"`
	Limit          int64   `json:"limit"`
	ResetTime      int64   `json:"resetTime"`
}

// CallLimits are the per-call limits the workload sends: the token
// bucket's Limit per DurationMs, and the leaky bucket's Limit leaking per
// DurationMs with a burst of Limit.
type CallLimits struct {
	TokenLimit, LeakyLimit, DurationMs int64
}

// CheckCalls judges per-call items. Token bucket (gubernator's: a window
// anchored at the key's first call, all of it back at its end): the
// allowed answers that name one window (one reset time) number at most
// the limit, and two windows are at least a duration apart (a window
// cannot reopen before the last one ended). Leaky bucket: the allowed
// answers sent and received within any span of client time number at most
// Limit + Limit*(span + slackMs)/Duration (a full bucket, and what leaks
// meanwhile; slackMs covers the cluster clock running ahead of the
// client's). Answers that may have counted without being seen (unknown)
// only lower what was observed, so every bound stays sound.
func CheckCalls(ops []CallOp, lim CallLimits, slackMs int64) []Violation {
	var v []Violation
	byKey := map[string][]CallOp{}
	for _, op := range ops {
		if op.Outcome != OutcomeOK || !op.Allowed {
			continue
		}
		want := lim.TokenLimit
		if op.Leaky {
			want = lim.LeakyLimit
		}
		if op.Limit != want || op.Remaining < 0 || op.Remaining >= want {
			v = append(v, Violation{Check: CheckCallAnswerMalformed, Key: op.Key, OpIDs: []int{op.ID},
				Detail: fmt.Sprintf("allowed with limit %d and remaining %d; the limit is %d", op.Limit, op.Remaining, want)})
			continue
		}
		byKey[op.Key] = append(byKey[op.Key], op)
	}
	for key, kops := range byKey {
		if kops[0].Leaky {
			v = append(v, checkLeaky(key, kops, lim, slackMs)...)
		} else {
			v = append(v, checkToken(key, kops, lim)...)
		}
	}
	slices.SortFunc(v, func(a, b Violation) int { return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Check, b.Check)) })
	return v
}

func checkToken(key string, ops []CallOp, lim CallLimits) []Violation {
	var v []Violation
	windows := map[int64][]int{}
	for _, op := range ops {
		windows[op.ResetTime] = append(windows[op.ResetTime], op.ID)
	}
	var resets []int64
	for r, ids := range windows {
		resets = append(resets, r)
		if int64(len(ids)) > lim.TokenLimit {
			v = append(v, Violation{Check: CheckCallTokenOverLimit, Key: key, OpIDs: ids,
				Detail: fmt.Sprintf("%d allowed in the window ending at %d; the limit is %d", len(ids), r, lim.TokenLimit)})
		}
	}
	slices.Sort(resets)
	for i := 1; i < len(resets); i++ {
		if resets[i]-resets[i-1] < lim.DurationMs {
			v = append(v, Violation{Check: CheckCallTokenWindows, Key: key, OpIDs: append(slices.Clone(windows[resets[i-1]]), windows[resets[i]]...),
				Detail: fmt.Sprintf("windows ending at %d and %d overlap (duration %d ms)", resets[i-1], resets[i], lim.DurationMs)})
		}
	}
	return v
}

func checkLeaky(key string, ops []CallOp, lim CallLimits, slackMs int64) []Violation {
	// Every op that started at or after a start s and returned by T was
	// decided within [s, T]: for each start, walk the ops in return order.
	byReturn := slices.Clone(ops)
	slices.SortFunc(byReturn, func(a, b CallOp) int { return cmp.Compare(a.Return, b.Return) })
	for _, first := range ops {
		n := int64(0)
		var ids []int
		for _, op := range byReturn {
			if op.Invoke < first.Invoke {
				continue
			}
			n++
			ids = append(ids, op.ID)
			spanMs := max(0, (op.Return-first.Invoke)/1e6)
			if allowed := lim.LeakyLimit + lim.LeakyLimit*(spanMs+slackMs)/lim.DurationMs; n > allowed {
				return []Violation{{Check: CheckCallLeakyOverLimit, Key: key, OpIDs: ids,
					Detail: fmt.Sprintf("%d allowed within %d ms; a bucket of %d leaking %d per %d ms allows at most %d", n, spanMs, lim.LeakyLimit, lim.LeakyLimit, lim.DurationMs, allowed)}}
			}
		}
	}
	return nil
}
