// Package checker judges the history of a jepsen-lite run against rlnode's
// rate-limiting semantics: every key (or group of keys that all-or-nothing
// checks tie together) must be linearizable against its policy's algorithm
// (fixed window, sliding window or token bucket; checked with porcupine),
// and no fixed window may ever admit more than its limit.
package checker

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Kind is the kind of client operation.
type Kind string

// Operation kinds.
const (
	KindHit  Kind = "hit"  // GET /check/:client, consumes
	KindPeek Kind = "peek" // GET /v1/status/:client, linearizable read
	// KindMulti is POST /v1/check: several hits in one log entry, all or
	// nothing. Its hits are in Parts; Allowed is the answer as a whole.
	KindMulti Kind = "multi"
)

// Outcome says whether the client learned the result of an operation.
type Outcome string

// Outcomes. ok = definite answer (hit: 200 or 429; peek: 200). unknown = the
// operation may or may not have taken effect (timeout, 503 outcome_unknown,
// connection lost, ...).
const (
	OutcomeOK      Outcome = "ok"
	OutcomeUnknown Outcome = "unknown"
)

// Op is one client operation of the history.
type Op struct {
	ID      int     `json:"id"`
	Client  int     `json:"client"` // worker number
	Kind    Kind    `json:"kind"`
	Key     string  `json:"key"`              // what the checker partitions by; unique over policies
	Policy  string  `json:"policy,omitempty"` // "" = DefaultPolicy
	Node    string  `json:"node"`
	Invoke  int64   `json:"invoke"` // ns since run start
	Return  int64   `json:"return"` // ns since run start (for unknown: when the client gave up)
	Outcome Outcome `json:"outcome"`
	Error   string  `json:"error,omitempty"`
	// Status is the HTTP status of the answer (0: none, or not over
	// HTTP): a 4xx that is not the caller's mistake is a violation.
	Status int `json:"status,omitempty"`
	// hit outputs (Outcome ok)
	Allowed      bool          `json:"allowed,omitempty"`
	Remaining    int64         `json:"remaining,omitempty"`
	ResetAt      int64         `json:"resetAt,omitempty"`      // Unix ms; fixed window start = ResetAt - WindowMs
	RetryAfterMs int64         `json:"retryAfterMs,omitempty"` // refused hits
	Limits       []LimitResult `json:"limits,omitempty"`       // per limit, in the policy's order
	// multi outputs: one per hit of the request, in request order
	Parts []Part `json:"parts,omitempty"`
	// Decided is how the node decided a hit: "local" (from a lease it
	// holds) or "log" (X-Rlnode-Decided; empty from older nodes).
	Decided string `json:"decided,omitempty"`
	// peek outputs (Outcome ok)
	WindowStart int64 `json:"windowStart,omitempty"` // raw stored window start, 0 = no stored window
	Used        int64 `json:"used,omitempty"`        // raw stored count
	AppliedNow  int64 `json:"appliedNow,omitempty"`  // FSM applied time (Unix ms) when the peek was served
}

// LimitResult is one limit's part of an answer (the body's "limits").
type LimitResult struct {
	Limit       int64 `json:"limit"` // as reported: a token bucket's burst
	WindowMs    int64 `json:"windowMs,omitempty"`
	Remaining   int64 `json:"remaining"`
	ResetAt     int64 `json:"resetAt"`
	WindowStart int64 `json:"windowStart,omitempty"` // fixed: anchored start; sliding: aligned start
}

// Part is one hit of a multi-key check and its result. On a refused
// (429) request, Allowed says whether this hit alone would have passed;
// nothing was counted either way.
type Part struct {
	Key          string        `json:"key"`
	Policy       string        `json:"policy,omitempty"`
	Allowed      bool          `json:"allowed,omitempty"`
	Remaining    int64         `json:"remaining,omitempty"`
	ResetAt      int64         `json:"resetAt,omitempty"`
	RetryAfterMs int64         `json:"retryAfterMs,omitempty"`
	Limits       []LimitResult `json:"limits,omitempty"`
}

// Config is the policy table the cluster ran with, plus the checker's time
// budget. Limit and WindowMs describe the policy of ops that name none
// (DefaultPolicy, a fixed window), unless Policies has its own.
type Config struct {
	Limit    int64
	WindowMs int64
	Policies map[string]Policy
	Timeout  time.Duration // porcupine budget per key group; 0 = 60s
	// StartUnixMs is the wall clock (Unix ms) of the instant op times
	// count from; 0 skips the leased late-spend check.
	StartUnixMs int64
	// LeasedSlackMs is that check's clock tolerance (0: 250 ms).
	LeasedSlackMs int64
	// ClockJumps are the run's faults that may move cluster time forward
	// (a leader's clock skewed ahead): a token bucket refills by that much
	// more, for strict and leased keys alike, so the leased bucket bound
	// of a span that overlaps one adds its refill.
	ClockJumps []ClockJump
	// clock bounds cluster time from the history (Check builds it).
	clock *clusterClock
}

// ClockJump is a fault that may move cluster time forward by up to Ms,
// at some instant between From and To (ns since the run's start).
type ClockJump struct {
	From, To int64
	Ms       int64
}

// DefaultTimeout is the per-key porcupine budget when Config.Timeout is 0.
const DefaultTimeout = 60 * time.Second

// Violation is one reason the history is invalid.
type Violation struct {
	Check  string `json:"check"`
	Key    string `json:"key"`
	Detail string `json:"detail"`
	OpIDs  []int  `json:"opIds,omitempty"`
}

// Names of the checks, as they appear in Violation.Check.
const (
	CheckConfig             = "config"
	CheckMalformed          = "malformed-op"
	CheckNeverMoreThanN     = "never-more-than-n"
	CheckDistinctRemaining  = "distinct-remaining"
	CheckLinearizability    = "linearizability"
	CheckLinearizingTimeout = "linearizability-timeout"
	CheckGroupTooLarge      = "group-too-large"
	CheckWrongStatus        = "wrong-status"
)

// Linearizability verdicts of one key, as in KeyResult.Linearizable.
const (
	LinOK      = "ok"
	LinIllegal = "illegal"
	LinUnknown = "unknown" // porcupine ran out of time
)

// KeyResult is the linearizability verdict for one key.
type KeyResult struct {
	Key          string `json:"key"`
	Ops          int    `json:"ops"`
	Linearizable string `json:"linearizable"` // "ok" | "illegal" | "unknown" (timed out)
}

// Result is the verdict on a whole history.
type Result struct {
	// Valid is false if there is any violation; an illegal or timed-out
	// key always comes with one.
	Valid      bool                                                             `json:"valid"`
	Keys       []KeyResult                                                      `json:"keys"`
	Violations []Violation                                                      `json:"violations"`
	Leased     []LeasedResult                                                   `json:"leased,omitempty"`
	Counts     struct{ Ops, Hits, Peeks, Multi, Allowed, Refused, Unknown int } `json:"counts"`
}

// Check judges history. It never returns early on the first problem: the
// report lists every violation it finds.
func Check(cfg Config, history []Op) Result {
	res := Result{Keys: []KeyResult{}, Violations: []Violation{}}
	countOps(&res, history)
	pols, err := cfg.policies()
	if err != nil {
		res.Violations = append(res.Violations, Violation{Check: CheckConfig, Detail: err.Error()})
		return res
	}

	res.Violations = append(res.Violations, wrongStatuses(history)...)
	cfg.clock = newClusterClock(pols, history)
	gs, leased, bad := prepare(pols, history)
	res.Violations = append(res.Violations, bad...)
	for _, key := range slices.Sorted(maps.Keys(leased)) {
		ops := leased[key]
		v, lr := checkLeased(cfg, key, pols[policyName(ops[0].Policy)], ops)
		res.Violations = append(res.Violations, v...)
		res.Leased = append(res.Leased, lr)
	}
	for _, g := range gs {
		res.Violations = append(res.Violations, windowViolations(g)...)
	}

	verdicts := linearizeGroups(cfg, gs)
	for i, g := range gs {
		kr, v := keyVerdict(cfg, g, verdicts[i])
		res.Keys = append(res.Keys, kr)
		if v != nil {
			res.Violations = append(res.Violations, *v)
		}
	}

	res.Valid = len(res.Violations) == 0
	return res
}

// keyVerdict turns porcupine's answer for one group of keys into its
// KeyResult and, unless the group is proven linearizable, a violation: a
// timeout proves nothing, so it must not pass for a success.
func keyVerdict(cfg Config, g *group, r porcupine.CheckResult) (KeyResult, *Violation) {
	key, ops := g.name(), len(g.ops)
	kr := KeyResult{Key: key, Ops: ops}
	switch r {
	case porcupine.Ok:
		kr.Linearizable = LinOK
		return kr, nil
	case porcupine.Illegal:
		kr.Linearizable = LinIllegal
		var specs []string
		for i, k := range g.keys {
			m := g.models[i]
			specs = append(specs, fmt.Sprintf("%s: %s %s", k, m.p.Algorithm, describeLimits(m.p)))
		}
		return kr, &Violation{
			Check: CheckLinearizability, Key: key,
			Detail: fmt.Sprintf("no order of the %d ops is consistent with the spec (%s); see lin-*.html from WriteVisualizations",
				ops, strings.Join(specs, "; ")),
		}
	default:
		kr.Linearizable = LinUnknown
		return kr, &Violation{
			Check: CheckLinearizingTimeout, Key: key,
			Detail: fmt.Sprintf("porcupine gave up after %s on %d ops: linearizability is unproven", cfg.timeout(), ops),
		}
	}
}

func describeLimits(p Policy) string {
	var vs []string
	for _, limits := range p.Versions {
		var ls []string
		for _, l := range limits {
			d := fmt.Sprintf("%d per %dms", l.Limit, l.WindowMs)
			if l.Burst > 0 {
				d += fmt.Sprintf(" burst %d", l.Burst)
			}
			ls = append(ls, d)
		}
		vs = append(vs, strings.Join(ls, " and "))
	}
	return strings.Join(vs, ", raised to ")
}

func (cfg Config) validate() error {
	_, err := cfg.policies()
	return err
}

func (cfg Config) timeout() time.Duration {
	if cfg.Timeout <= 0 {
		return DefaultTimeout
	}
	return cfg.Timeout
}

func countOps(res *Result, history []Op) {
	c := &res.Counts
	c.Ops = len(history)
	for _, op := range history {
		switch op.Kind {
		case KindHit:
			c.Hits++
		case KindPeek:
			c.Peeks++
		case KindMulti:
			c.Multi++
		}
		switch {
		case op.Outcome == OutcomeUnknown:
			c.Unknown++
		case op.Kind != KindPeek && op.Allowed:
			c.Allowed++
		case op.Kind != KindPeek:
			c.Refused++
		}
	}
}
