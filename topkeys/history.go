package topkeys

import (
	"slices"
	"strings"
	"time"
)

// History defaults: 120 steps of 5 s, the last 10 minutes, for at most 64
// policies per step (what the status page charts; a policy past the bound
// in a step is left out of that step's history, never out of the top
// keys, and counted in Report.Dropped).
const (
	DefaultHistoryStep     = 5 * time.Second
	DefaultHistorySteps    = 120
	DefaultHistoryPolicies = 64
)

// Point is one history step of a policy: the hits recorded from T (Unix
// ms, a multiple of the step, so every node's steps line up) for one step.
type Point struct {
	T           int64  `json:"t"`
	Allowed     uint64 `json:"allowed"`
	Refused     uint64 `json:"refused"`
	WouldRefuse uint64 `json:"wouldRefuse,omitempty"`
}

// PolicyHistory is a policy's hits per step over the history's span,
// oldest first, one point per step (zeros included) up to now.
type PolicyHistory struct {
	Policy string  `json:"policy"`
	StepMs int64   `json:"stepMs"`
	Points []Point `json:"points"`
}

// histStep is one step of the ring: its start (Unix ms) and the counts by
// policy and outcome.
type histStep struct {
	t      int64
	counts map[string]*[outcomes]uint64
}

// histCount adds one hit to the history step of now (owner goroutine,
// under r.mu).
func (r *Recorder) histCount(h hit, nowMs int64) {
	stepMs := r.cfg.HistoryStep.Milliseconds()
	t := nowMs - nowMs%stepMs
	i := int(t/stepMs) % len(r.hist)
	s := &r.hist[i]
	if s.t != t {
		*s = histStep{t: t, counts: map[string]*[outcomes]uint64{}}
	}
	c := s.counts[h.policy]
	if c == nil {
		if len(s.counts) >= r.cfg.HistoryPolicies {
			r.histDropped++
			return
		}
		c = new([outcomes]uint64)
		s.counts[h.policy] = c
	}
	c[h.outcome]++
}

// History returns each policy's hits per step over the last HistorySteps
// steps (the current one included), of policy or of every policy when
// policy is "".
func (r *Recorder) History(policy string) []PolicyHistory {
	r.mu.Lock()
	defer r.mu.Unlock()
	stepMs := r.cfg.HistoryStep.Milliseconds()
	nowMs := r.now().UnixMilli()
	last := nowMs - nowMs%stepMs
	first := last - int64(len(r.hist)-1)*stepMs
	byPolicy := map[string][]Point{}
	for _, s := range r.hist {
		if s.counts == nil || s.t < first || s.t > last {
			continue
		}
		for name, c := range s.counts {
			if policy != "" && name != policy {
				continue
			}
			pts := byPolicy[name]
			if pts == nil {
				pts = make([]Point, len(r.hist))
				for j := range pts {
					pts[j].T = first + int64(j)*stepMs
				}
				byPolicy[name] = pts
			}
			pts[(s.t-first)/stepMs] = Point{T: s.t, Allowed: c[Allowed], Refused: c[Refused], WouldRefuse: c[WouldRefuse]}
		}
	}
	out := make([]PolicyHistory, 0, len(byPolicy))
	for name, pts := range byPolicy {
		out = append(out, PolicyHistory{Policy: name, StepMs: stepMs, Points: pts})
	}
	slices.SortFunc(out, func(a, b PolicyHistory) int { return strings.Compare(a.Policy, b.Policy) })
	return out
}

// MergeHistories adds up several nodes' histories step by step (their hits
// are disjoint). Steps are aligned to the step length, so equal T is the
// same step on every node; the merged span is the union of theirs.
func MergeHistories(hs ...[]PolicyHistory) []PolicyHistory {
	type key struct {
		policy string
		t      int64
	}
	sum := map[key]*Point{}
	step := map[string]int64{}
	for _, h := range hs {
		for _, p := range h {
			if p.StepMs <= 0 {
				continue
			}
			if s, ok := step[p.Policy]; ok && s != p.StepMs {
				continue // a node with another step length: leave it out
			}
			step[p.Policy] = p.StepMs
			for _, pt := range p.Points {
				k := key{p.Policy, pt.T}
				s := sum[k]
				if s == nil {
					s = &Point{T: pt.T}
					sum[k] = s
				}
				s.Allowed += pt.Allowed
				s.Refused += pt.Refused
				s.WouldRefuse += pt.WouldRefuse
			}
		}
	}
	byPolicy := map[string][]Point{}
	for k, p := range sum {
		byPolicy[k.policy] = append(byPolicy[k.policy], *p)
	}
	out := make([]PolicyHistory, 0, len(byPolicy))
	for name, pts := range byPolicy {
		slices.SortFunc(pts, func(a, b Point) int { return int(a.T - b.T) })
		out = append(out, PolicyHistory{Policy: name, StepMs: step[name], Points: pts})
	}
	slices.SortFunc(out, func(a, b PolicyHistory) int { return strings.Compare(a.Policy, b.Policy) })
	return out
}
