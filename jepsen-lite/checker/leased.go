package checker

import (
	"fmt"
	"maps"
	"slices"
	"sort"
)

// Leased keys (Policy.Leased) are decided by the node that holds a lease
// for them, from memory: not linearizable, so they are not given to
// porcupine. What must hold is never over the limit:
//
//   - fixed window: at most the limit allowed per anchored window, and no
//     allowed answer to a check invoked after its window had ended (units
//     of an ended window spent late: a holder paused past its lease that
//     woke up and spent what it held);
//   - sliding window: at most the limit allowed per aligned window (the
//     estimate counts every one of them), none invoked after the window
//     its units belong to had ended;
//   - token bucket: for every run of allowed checks, no more than the
//     burst plus what refills between the first one's invoke and the last
//     one's return (plus, for a span that overlaps a fault skewing the
//     leader's clock ahead, what that jump of cluster time refills: a
//     strict bucket gets it too).
//
// Under-admission is measured, not judged: per fixed window where some
// check was refused (demand exceeded the limit), the share of the limit
// that was admitted.

// Names of the leased checks, as in Violation.Check.
const (
	CheckLeasedOverLimit = "leased-over-limit"
	CheckLeasedLate      = "leased-spent-after-window"
	// CheckLeasedLateCluster: the same judged in cluster time (an answer
	// returned before the check was invoked showed the cluster's time at
	// or past the window's end).
	CheckLeasedLateCluster = "leased-spent-after-window-cluster-time"
	CheckLeasedMulti       = "leased-in-multi"
)

// LeasedResult is the verdict on one leased key, with its under-admission.
type LeasedResult struct {
	Key       string `json:"key"`
	Algorithm string `json:"algorithm"`
	Allowed   int    `json:"allowed"`
	Refused   int    `json:"refused"`
	Local     int    `json:"local"` // answered from a lease (X-Rlnode-Decided: local)
	// FullWindows counts windows with a refusal (demand over the limit);
	// Fill is the mean share of the limit they admitted, MinFill the least
	// (a sliding window's estimate carries the previous window, so its
	// fill is below 1 even when exact). A token bucket's Fill is what it
	// admitted over burst + refill from its first to its last check,
	// when some were refused.
	FullWindows int     `json:"fullWindows,omitempty"`
	Fill        float64 `json:"fill,omitempty"`
	MinFill     float64 `json:"minFill,omitempty"`
	// Windows are the full windows (fixed and sliding), to relate their
	// fill to the faults active meanwhile.
	Windows []LeasedWindow `json:"windows,omitempty"`
}

// LeasedWindow is one window where demand exceeded the limit: its span
// (Unix ms, cluster time) and the share of the limit it admitted.
type LeasedWindow struct {
	Start int64   `json:"start"`
	End   int64   `json:"end"`
	Fill  float64 `json:"fill"`
}

// leasedSlackMs is the default tolerance of the late check for clock
// granularity between the runner and the cluster (one host or one
// machine's namespaces).
const leasedSlackMs = 250

func (cfg Config) slackMs() int64 {
	if cfg.LeasedSlackMs > 0 {
		return cfg.LeasedSlackMs
	}
	return leasedSlackMs
}

// checkLeased judges one leased key's ops.
func checkLeased(cfg Config, key string, p Policy, ops []Op) ([]Violation, LeasedResult) {
	res := LeasedResult{Key: key, Algorithm: p.Algorithm}
	var allowed []Op
	for _, op := range ops {
		if op.Outcome != OutcomeOK || op.Kind != KindHit {
			continue
		}
		if op.Decided == "local" {
			res.Local++
		}
		if op.Allowed {
			res.Allowed++
			allowed = append(allowed, op)
		} else {
			res.Refused++
		}
	}
	var out []Violation
	switch p.Algorithm {
	case FixedWindow, SlidingWindow:
		out = leasedWindows(cfg, key, p, ops, &res)
	case TokenBucket:
		out = leasedBucket(key, p, allowed, cfg.ClockJumps)
		bucketFill(p, ops, &res)
	}
	return out, res
}

// windowOf is the window an answer's units belong to: its start and end.
func windowOf(p Policy, op Op) (start, end int64) {
	v := max(0, p.version(op.Limits))
	w := p.Versions[v][0].WindowMs
	if len(op.Limits) > 0 && op.Limits[0].WindowStart != 0 {
		return op.Limits[0].WindowStart, op.Limits[0].WindowStart + w
	}
	return op.ResetAt - w, op.ResetAt
}

func leasedWindows(cfg Config, key string, p Policy, ops []Op, res *LeasedResult) []Violation {
	type win struct {
		allowed, refused []Op
		limit            int64
	}
	byStart := map[int64]*win{}
	var out []Violation
	for _, op := range ops {
		if op.Outcome != OutcomeOK || op.Kind != KindHit {
			continue
		}
		start, end := windowOf(p, op)
		w := byStart[start]
		if w == nil {
			w = &win{}
			byStart[start] = w
		}
		w.limit = max(w.limit, p.Versions[max(0, p.version(op.Limits))][0].Limit)
		if !op.Allowed {
			w.refused = append(w.refused, op)
			continue
		}
		w.allowed = append(w.allowed, op)
		if at := cfg.clock.atLeast(op.Invoke); at >= end {
			out = append(out, Violation{Check: CheckLeasedLateCluster, Key: key, OpIDs: []int{op.ID},
				Detail: fmt.Sprintf("allowed check invoked when cluster time was already %d ms past its window [%d, %d) (decided %s on %s)", at-end, start, end, decidedWord(op), op.Node)})
		}
		if cfg.StartUnixMs > 0 {
			if late := cfg.StartUnixMs + op.Invoke/1e6 - end; late > cfg.slackMs() {
				out = append(out, Violation{Check: CheckLeasedLate, Key: key, OpIDs: []int{op.ID},
					Detail: fmt.Sprintf("allowed check invoked %d ms after its window [%d, %d) ended (decided %s on %s)", late, start, end, decidedWord(op), op.Node)})
			}
		}
	}
	fillSum := 0.0
	res.MinFill = 1
	for _, start := range slices.Sorted(maps.Keys(byStart)) {
		w := byStart[start]
		if n := int64(len(w.allowed)); n > w.limit {
			out = append(out, Violation{Check: CheckLeasedOverLimit, Key: key, OpIDs: opIDs(w.allowed),
				Detail: fmt.Sprintf("%s window starting %d admitted %d, limit is %d", p.Algorithm, start, n, w.limit)})
		}
		if len(w.refused) > 0 {
			fill := min(1, float64(len(w.allowed))/float64(w.limit))
			_, end := windowOf(p, w.refused[0])
			res.Windows = append(res.Windows, LeasedWindow{Start: start, End: end, Fill: fill})
			res.FullWindows++
			fillSum += fill
			res.MinFill = min(res.MinFill, fill)
		}
	}
	if res.FullWindows > 0 {
		res.Fill = fillSum / float64(res.FullWindows)
	} else {
		res.MinFill = 0
	}
	return out
}

// leasedBucket checks every run of allowed checks (in invoke order)
// against burst + refill, per limit of the largest version.
func leasedBucket(key string, p Policy, allowed []Op, jumps []ClockJump) []Violation {
	sort.Slice(allowed, func(i, j int) bool { return allowed[i].Invoke < allowed[j].Invoke })
	limits := p.Versions[len(p.Versions)-1]
	for _, l := range limits {
		burst := l.capacity(TokenBucket)
		for i := range allowed {
			end := int64(0)
			for j := i; j < len(allowed); j++ {
				end = max(end, allowed[j].Return)
				// Every one was decided between the first's invoke and the
				// latest return: the bucket gives at most burst + refill then.
				spanMs := (end - allowed[i].Invoke + 1e6 - 1) / 1e6
				for _, jmp := range jumps {
					if jmp.From <= end && allowed[i].Invoke <= jmp.To {
						spanMs += jmp.Ms // cluster time ran ahead by up to that much
					}
				}
				bound := burst + spanMs*l.Limit/l.WindowMs
				if n := int64(j - i + 1); n > bound {
					return []Violation{{Check: CheckLeasedOverLimit, Key: key, OpIDs: opIDs(allowed[i : j+1]),
						Detail: fmt.Sprintf("token bucket admitted %d within %d ms, burst %d + refill allows %d", n, spanMs, burst, bound)}}
				}
			}
		}
	}
	return nil
}

func decidedWord(op Op) string {
	if op.Decided == "" {
		return "log"
	}
	return op.Decided
}

// bucketFill measures a token bucket's admitted share of burst + refill
// over the run, when demand went over it (something was refused).
func bucketFill(p Policy, ops []Op, res *LeasedResult) {
	if res.Refused == 0 || len(ops) == 0 {
		return
	}
	first, last := ops[0].Invoke, ops[0].Invoke
	for _, op := range ops {
		first, last = min(first, op.Invoke), max(last, op.Invoke)
	}
	l := p.Versions[0][0]
	bound := float64(l.capacity(TokenBucket)) + float64((last-first)/1e6)*float64(l.Limit)/float64(l.WindowMs)
	res.Fill = min(1, float64(res.Allowed)/bound)
	res.MinFill = res.Fill
}
