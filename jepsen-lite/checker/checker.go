// Package checker judges the history of a jepsen-lite run against rlnode's
// rate-limiting semantics: every key (or group of keys that all-or-nothing
// checks tie together) must be linearizable against its policy's algorithm
// (fixed window, sliding window or token bucket; checked with porcupine),
// and no fixed window may ever admit more than its limit.
package checker

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
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
	// hit outputs (Outcome ok)
	Allowed      bool          `json:"allowed,omitempty"`
	Remaining    int64         `json:"remaining,omitempty"`
	ResetAt      int64         `json:"resetAt,omitempty"`      // Unix ms; fixed window start = ResetAt - WindowMs
	RetryAfterMs int64         `json:"retryAfterMs,omitempty"` // refused hits
	Limits       []LimitResult `json:"limits,omitempty"`       // per limit, in the policy's order
	// multi outputs: one per hit of the request, in request order
	Parts []Part `json:"parts,omitempty"`
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

	gs, bad := prepare(pols, history)
	res.Violations = append(res.Violations, bad...)
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

// WriteVisualizations writes porcupine's HTML visualization for every key
// group that is not linearizable (file name: lin-<sanitized key>.html) into
// dir and returns the paths. Groups that are linearizable, or whose check
// timed out, get no file.
func WriteVisualizations(cfg Config, history []Op, dir string) ([]string, error) {
	pols, err := cfg.policies()
	if err != nil {
		return nil, fmt.Errorf("checker config: %w", err)
	}
	gs, _ := prepare(pols, history)

	// The verbose check is much more expensive, so it only runs on the
	// groups the fast check found illegal.
	var illegal []*group
	for i, v := range linearizeGroups(cfg, gs) {
		if v == porcupine.Illegal {
			illegal = append(illegal, gs[i])
		}
	}
	if len(illegal) == 0 {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create visualization dir: %w", err)
	}
	var paths []string
	names := make(map[string]bool)
	for _, g := range illegal {
		model := g.porcupineModel()
		_, info := porcupine.CheckOperationsVerbose(model, groupHistory(g.ops), cfg.timeout())
		path := filepath.Join(dir, fileName(g.name(), names))
		if err := writeVisualization(model, info, path); err != nil {
			return paths, fmt.Errorf("visualize key %q: %w", g.name(), err)
		}
		paths = append(paths, path)
	}
	return paths, nil
}

func writeVisualization(model porcupine.Model, info porcupine.LinearizationInfo, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := porcupine.Visualize(model, info, f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// fileName returns a file name for key's visualization that is safe on any
// file system and not already in used, and records it there.
func fileName(key string, used map[string]bool) string {
	const maxKeyLen = 100
	var b strings.Builder
	for _, r := range key {
		if b.Len() >= maxKeyLen {
			break
		}
		if r < 128 && (r == '-' || r == '_' || r == '.' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	base := "lin-" + b.String()
	name := base + ".html"
	// Sanitizing can map two keys to one name; never overwrite.
	for n := 2; used[name]; n++ {
		name = fmt.Sprintf("%s-%d.html", base, n)
	}
	used[name] = true
	return name
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

// prepare checks every op against the policy table, reports the ones it
// cannot judge (a malformed op makes the run invalid rather than being
// guessed at), and partitions the rest into groups of keys.
func prepare(pols map[string]Policy, history []Op) ([]*group, []Violation) {
	byKey := make(map[string][]Op)
	models := make(map[string]keyModel)
	var multis []Op
	var bad []Violation
	for _, op := range history {
		if err := checkOp(pols, models, op); err != nil {
			bad = append(bad, Violation{Check: CheckMalformed, Key: op.Key, Detail: err.Error(), OpIDs: []int{op.ID}})
			continue
		}
		if op.Kind == KindMulti {
			multis = append(multis, op)
			continue
		}
		byKey[op.Key] = append(byKey[op.Key], op)
	}
	gs, tooLarge := groups(byKey, multis, models)
	return gs, append(bad, tooLarge...)
}

func policyName(p string) string {
	if p == "" {
		return DefaultPolicy
	}
	return p
}

// checkOp says why op cannot be judged, or nil; it records each key's
// policy in models, and a key must keep its policy.
func checkOp(pols map[string]Policy, models map[string]keyModel, op Op) error {
	if op.Kind != KindHit && op.Kind != KindPeek && op.Kind != KindMulti {
		return fmt.Errorf("op %d: unknown kind %q", op.ID, op.Kind)
	}
	if op.Outcome != OutcomeOK && op.Outcome != OutcomeUnknown {
		return fmt.Errorf("op %d: unknown outcome %q", op.ID, op.Outcome)
	}
	if op.Return < op.Invoke {
		return fmt.Errorf("op %d: returns (%d) before it is invoked (%d)", op.ID, op.Return, op.Invoke)
	}
	if op.Kind == KindMulti {
		if len(op.Parts) == 0 {
			return fmt.Errorf("op %d: multi-key check without hits", op.ID)
		}
		for _, p := range op.Parts {
			o := op
			o.Kind, o.Key, o.Policy, o.Parts = KindHit, p.Key, p.Policy, nil
			o.Allowed, o.Remaining, o.ResetAt, o.RetryAfterMs, o.Limits = p.Allowed, p.Remaining, p.ResetAt, p.RetryAfterMs, p.Limits
			if op.Outcome == OutcomeOK && !op.Allowed && p.Allowed {
				o.Allowed = true // would have passed: judged as a hit
			}
			if err := checkOp(pols, models, o); err != nil {
				return fmt.Errorf("op %d part %s: %w", op.ID, p.Key, err)
			}
		}
		return nil
	}
	name := policyName(op.Policy)
	p, ok := pols[name]
	if !ok {
		return fmt.Errorf("op %d: policy %q is not in the checker's table", op.ID, name)
	}
	if m, seen := models[op.Key]; seen && m.policy != name {
		return fmt.Errorf("op %d: key %q is in policy %q, earlier ops said %q", op.ID, op.Key, name, m.policy)
	}
	models[op.Key] = keyModel{policy: name, p: p}
	if op.Outcome != OutcomeOK {
		return nil
	}
	if op.Kind == KindPeek {
		if p.Algorithm != FixedWindow {
			return fmt.Errorf("op %d: the checker models peeks of fixed windows only (policy %q is %s)", op.ID, name, p.Algorithm)
		}
		if op.WindowStart < 0 {
			return fmt.Errorf("op %d: peek with negative windowStart (%d)", op.ID, op.WindowStart)
		}
		return nil
	}
	v := p.version(op.Limits)
	if v < 0 {
		return fmt.Errorf("op %d: the answer's limits %+v match no version of policy %q (%s)", op.ID, op.Limits, name, describeLimits(p))
	}
	if p.Algorithm == FixedWindow && op.ResetAt-p.Versions[v][0].WindowMs <= 0 {
		return fmt.Errorf("op %d: definite hit without a plausible resetAt (%d)", op.ID, op.ResetAt)
	}
	if p.Algorithm != FixedWindow && len(op.Limits) != len(p.Versions[v]) {
		return fmt.Errorf("op %d: a %s answer needs its per-limit detail", op.ID, p.Algorithm)
	}
	return nil
}

// windowViolations checks, for every fixed window of every key of g, that
// it admitted at most its limit and that no two admitted hits were told
// the same remaining: each admitted hit counts, so every one must see a
// different count. Only definite answers are evidence here.
func windowViolations(g *group) []Violation {
	var out []Violation
	for i, key := range g.keys {
		m := g.models[i]
		if m.p.Algorithm != FixedWindow {
			continue
		}
		byWindow := make(map[int64][]admitted)
		add := func(op Op, rem, resetAt int64, limits []LimitResult) {
			l := m.p.Versions[max(0, m.p.version(limits))][0]
			byWindow[resetAt-l.WindowMs] = append(byWindow[resetAt-l.WindowMs], admitted{op, rem, l.Limit})
		}
		for _, op := range g.ops {
			switch {
			case op.Outcome != OutcomeOK || !op.Allowed:
			case op.Kind == KindHit && op.Key == key:
				add(op, op.Remaining, op.ResetAt, op.Limits)
			case op.Kind == KindMulti:
				for _, p := range op.Parts {
					if p.Key == key {
						add(op, p.Remaining, p.ResetAt, p.Limits)
					}
				}
			}
		}
		for _, start := range slices.Sorted(maps.Keys(byWindow)) {
			out = append(out, windowCheck(key, start, byWindow[start])...)
		}
	}
	return out
}

// admitted is one allowed hit of a fixed window.
type admitted struct {
	op    Op
	rem   int64
	limit int64 // of the policy version that decided it
}

func windowCheck(key string, start int64, allowed []admitted) []Violation {
	var out []Violation
	var ops []Op
	limit := int64(0)
	byRemaining := make(map[int64][]Op)
	for _, a := range allowed {
		ops = append(ops, a.op)
		limit = max(limit, a.limit)
		// each admitted hit leaves a different count (limit -
		// remaining: a raised limit changes remaining, not the count)
		byRemaining[a.limit-a.rem] = append(byRemaining[a.limit-a.rem], a.op)
	}
	if int64(len(allowed)) > limit {
		out = append(out, Violation{
			Check: CheckNeverMoreThanN, Key: key,
			Detail: fmt.Sprintf("window starting %d admitted %d hits, limit is %d", start, len(allowed), limit),
			OpIDs:  opIDs(ops),
		})
	}
	for _, count := range slices.Sorted(maps.Keys(byRemaining)) {
		if same := byRemaining[count]; len(same) > 1 {
			out = append(out, Violation{
				Check: CheckDistinctRemaining, Key: key,
				Detail: fmt.Sprintf("window starting %d: %d admitted hits were all told the window holds %d", start, len(same), count),
				OpIDs:  opIDs(same),
			})
		}
	}
	return out
}

func opIDs(ops []Op) []int {
	ids := make([]int, len(ops))
	for i, op := range ops {
		ids[i] = op.ID
	}
	slices.Sort(ids)
	return ids
}

// linearizeGroups runs porcupine on every group, a few at a time, each
// with its own time budget.
func linearizeGroups(cfg Config, gs []*group) []porcupine.CheckResult {
	verdicts := make([]porcupine.CheckResult, len(gs))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, g := range gs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			verdicts[i] = porcupine.CheckOperationsTimeout(g.porcupineModel(), groupHistory(g.ops), cfg.timeout())
		})
	}
	wg.Wait()
	return verdicts
}

// groupHistory turns one group's ops into porcupine operations. Unknown peeks
// are dropped: they change nothing and promise nothing. An unknown hit is
// linearized at its invocation, where the model only notes that it may
// count from then on (see state); that is the earliest it could have taken
// effect, and noting it early never rules out anything, so a zero-length
// interval loses nothing and spares porcupine a search. Workers are
// numbered from 0, as the visualization wants.
func groupHistory(ops []Op) []porcupine.Operation {
	var workers []int
	for _, op := range ops {
		workers = append(workers, op.Client)
	}
	slices.Sort(workers)
	workers = slices.Compact(workers)

	hist := make([]porcupine.Operation, 0, len(ops))
	for _, op := range ops {
		ret := op.Return
		if op.Outcome == OutcomeUnknown {
			if op.Kind == KindPeek {
				continue
			}
			ret = op.Invoke
		}
		row, _ := slices.BinarySearch(workers, op.Client)
		hist = append(hist, porcupine.Operation{
			ClientId: row,
			Input:    op,
			Call:     op.Invoke,
			Return:   ret,
			Metadata: fmt.Sprintf("op %d, worker %d, node %s", op.ID, op.Client, op.Node),
		})
	}
	return hist
}
