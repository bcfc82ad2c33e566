// Package checker judges the history of a jepsen-lite run against rlnode's
// fixed-window semantics: every key must be linearizable (checked with
// porcupine) and no window may ever admit more than the limit.
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
	Key     string  `json:"key"`
	Node    string  `json:"node"`
	Invoke  int64   `json:"invoke"` // ns since run start
	Return  int64   `json:"return"` // ns since run start (for unknown: when the client gave up)
	Outcome Outcome `json:"outcome"`
	Error   string  `json:"error,omitempty"`
	// hit outputs (Outcome ok)
	Allowed   bool  `json:"allowed,omitempty"`
	Remaining int64 `json:"remaining,omitempty"`
	ResetAt   int64 `json:"resetAt,omitempty"` // Unix ms; window start = ResetAt - WindowMs
	// peek outputs (Outcome ok)
	WindowStart int64 `json:"windowStart,omitempty"` // raw stored window start, 0 = no stored window
	Used        int64 `json:"used,omitempty"`        // raw stored count
	AppliedNow  int64 `json:"appliedNow,omitempty"`  // FSM applied time (Unix ms) when the peek was served
}

// Config is the limiter configuration the cluster ran with, plus the
// checker's time budget.
type Config struct {
	Limit    int64
	WindowMs int64
	Timeout  time.Duration // porcupine budget per key; 0 = 60s
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
	Valid      bool                                                      `json:"valid"`
	Keys       []KeyResult                                               `json:"keys"`
	Violations []Violation                                               `json:"violations"`
	Counts     struct{ Ops, Hits, Peeks, Allowed, Refused, Unknown int } `json:"counts"`
}

// Check judges history. It never returns early on the first problem: the
// report lists every violation it finds.
func Check(cfg Config, history []Op) Result {
	res := Result{Keys: []KeyResult{}, Violations: []Violation{}}
	countOps(&res, history)
	if err := cfg.validate(); err != nil {
		res.Violations = append(res.Violations, Violation{Check: CheckConfig, Detail: err.Error()})
		return res
	}

	byKey, malformed := splitByKey(cfg, history)
	res.Violations = append(res.Violations, malformed...)

	keys := slices.Sorted(maps.Keys(byKey))
	for _, k := range keys {
		res.Violations = append(res.Violations, windowViolations(cfg, k, byKey[k])...)
	}

	verdicts := linearizeKeys(cfg, keys, byKey)
	for i, k := range keys {
		kr, v := keyVerdict(cfg, k, len(byKey[k]), verdicts[i])
		res.Keys = append(res.Keys, kr)
		if v != nil {
			res.Violations = append(res.Violations, *v)
		}
	}

	res.Valid = len(res.Violations) == 0
	return res
}

// keyVerdict turns porcupine's answer for one key into its KeyResult and,
// unless the key is proven linearizable, a violation: a timeout proves
// nothing, so it must not pass for a success.
func keyVerdict(cfg Config, key string, ops int, r porcupine.CheckResult) (KeyResult, *Violation) {
	kr := KeyResult{Key: key, Ops: ops}
	switch r {
	case porcupine.Ok:
		kr.Linearizable = LinOK
		return kr, nil
	case porcupine.Illegal:
		kr.Linearizable = LinIllegal
		return kr, &Violation{
			Check: CheckLinearizability, Key: key,
			Detail: fmt.Sprintf("no order of the key's %d ops is consistent with the fixed-window spec "+
				"(limit %d, window %dms); see lin-*.html from WriteVisualizations", ops, cfg.Limit, cfg.WindowMs),
		}
	default:
		kr.Linearizable = LinUnknown
		return kr, &Violation{
			Check: CheckLinearizingTimeout, Key: key,
			Detail: fmt.Sprintf("porcupine gave up after %s on %d ops: linearizability is unproven", cfg.timeout(), ops),
		}
	}
}

// WriteVisualizations writes porcupine's HTML visualization for every key
// that is not linearizable (file name: lin-<sanitized key>.html) into dir and
// returns the paths. Keys that are linearizable, or whose check timed out,
// get no file.
func WriteVisualizations(cfg Config, history []Op, dir string) ([]string, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("checker config: %w", err)
	}
	byKey, _ := splitByKey(cfg, history)
	keys := slices.Sorted(maps.Keys(byKey))

	// The verbose check is much more expensive, so it only runs on the
	// keys the fast check found illegal.
	var illegal []string
	for i, v := range linearizeKeys(cfg, keys, byKey) {
		if v == porcupine.Illegal {
			illegal = append(illegal, keys[i])
		}
	}
	if len(illegal) == 0 {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create visualization dir: %w", err)
	}
	model := spec{limit: cfg.Limit, windowMs: cfg.WindowMs}.porcupineModel()
	var paths []string
	names := make(map[string]bool)
	for _, k := range illegal {
		_, info := porcupine.CheckOperationsVerbose(model, keyHistory(byKey[k]), cfg.timeout())
		path := filepath.Join(dir, fileName(k, names))
		if err := writeVisualization(model, info, path); err != nil {
			return paths, fmt.Errorf("visualize key %q: %w", k, err)
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
	if cfg.Limit <= 0 {
		return fmt.Errorf("limit must be positive, got %d", cfg.Limit)
	}
	if cfg.WindowMs <= 0 {
		return fmt.Errorf("window must be positive, got %dms", cfg.WindowMs)
	}
	return nil
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
		}
		switch {
		case op.Outcome == OutcomeUnknown:
			c.Unknown++
		case op.Kind == KindHit && op.Allowed:
			c.Allowed++
		case op.Kind == KindHit:
			c.Refused++
		}
	}
}

// splitByKey groups the well-formed ops by key and reports the others. A
// malformed op cannot be judged, so it makes the run invalid rather than
// being guessed at.
func splitByKey(cfg Config, history []Op) (map[string][]Op, []Violation) {
	byKey := make(map[string][]Op)
	var bad []Violation
	for _, op := range history {
		if err := cfg.checkOp(op); err != nil {
			bad = append(bad, Violation{Check: CheckMalformed, Key: op.Key, Detail: err.Error(), OpIDs: []int{op.ID}})
			continue
		}
		byKey[op.Key] = append(byKey[op.Key], op)
	}
	return byKey, bad
}

func (cfg Config) checkOp(op Op) error {
	if op.Kind != KindHit && op.Kind != KindPeek {
		return fmt.Errorf("op %d: unknown kind %q", op.ID, op.Kind)
	}
	if op.Outcome != OutcomeOK && op.Outcome != OutcomeUnknown {
		return fmt.Errorf("op %d: unknown outcome %q", op.ID, op.Outcome)
	}
	if op.Return < op.Invoke {
		return fmt.Errorf("op %d: returns (%d) before it is invoked (%d)", op.ID, op.Return, op.Invoke)
	}
	if op.Outcome == OutcomeOK && op.Kind == KindHit && op.ResetAt-cfg.WindowMs <= 0 {
		return fmt.Errorf("op %d: definite hit without a plausible resetAt (%d)", op.ID, op.ResetAt)
	}
	if op.Outcome == OutcomeOK && op.Kind == KindPeek && op.WindowStart < 0 {
		return fmt.Errorf("op %d: peek with negative windowStart (%d)", op.ID, op.WindowStart)
	}
	return nil
}

// windowViolations checks, for every window of a key, that it admitted at
// most Limit hits and that no two admitted hits were told the same
// remaining: each admitted hit counts, so every one must see a different
// count. Only definite answers are evidence here.
func windowViolations(cfg Config, key string, ops []Op) []Violation {
	byWindow := make(map[int64][]Op)
	for _, op := range ops {
		if op.Kind == KindHit && op.Outcome == OutcomeOK && op.Allowed {
			start := op.ResetAt - cfg.WindowMs
			byWindow[start] = append(byWindow[start], op)
		}
	}
	var out []Violation
	for _, start := range slices.Sorted(maps.Keys(byWindow)) {
		allowed := byWindow[start]
		if int64(len(allowed)) > cfg.Limit {
			out = append(out, Violation{
				Check: CheckNeverMoreThanN, Key: key,
				Detail: fmt.Sprintf("window starting %d admitted %d hits, limit is %d", start, len(allowed), cfg.Limit),
				OpIDs:  opIDs(allowed),
			})
		}
		byRemaining := make(map[int64][]Op)
		for _, op := range allowed {
			byRemaining[op.Remaining] = append(byRemaining[op.Remaining], op)
		}
		for _, rem := range slices.Sorted(maps.Keys(byRemaining)) {
			if same := byRemaining[rem]; len(same) > 1 {
				out = append(out, Violation{
					Check: CheckDistinctRemaining, Key: key,
					Detail: fmt.Sprintf("window starting %d: %d admitted hits were all told remaining=%d", start, len(same), rem),
					OpIDs:  opIDs(same),
				})
			}
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

// linearizeKeys runs porcupine on every key, a few keys at a time, each with
// its own time budget.
func linearizeKeys(cfg Config, keys []string, byKey map[string][]Op) []porcupine.CheckResult {
	model := spec{limit: cfg.Limit, windowMs: cfg.WindowMs}.porcupineModel()
	verdicts := make([]porcupine.CheckResult, len(keys))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			verdicts[i] = porcupine.CheckOperationsTimeout(model, keyHistory(byKey[k]), cfg.timeout())
		})
	}
	wg.Wait()
	return verdicts
}

// keyHistory turns one key's ops into porcupine operations. Unknown peeks
// are dropped: they change nothing and promise nothing. An unknown hit is
// linearized at its invocation, where the model only notes that it may
// count from then on (see state); that is the earliest it could have taken
// effect, and noting it early never rules out anything, so a zero-length
// interval loses nothing and spares porcupine a search. Workers are
// numbered from 0, as the visualization wants.
func keyHistory(ops []Op) []porcupine.Operation {
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
