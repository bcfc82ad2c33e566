package checker

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
)

// maxGroup is the most keys one porcupine model tracks together. A
// multi-key check ties the keys it names together (it must count in all of
// them or none), so they cannot be checked apart; the checker models such
// keys as one group whose state is the tuple of its keys' states. Groups
// stay small by construction: jepsen-lite only sends multi-key checks
// across fixed pairs of keys.
const maxGroup = 2

// kstate is what a model knows about one key after a prefix of a
// linearization. Which fields mean what depends on the key's algorithm:
//
//	fixed_window:   a = window start, b = count                (see state)
//	sliding_window: a = current aligned window start, b = its count,
//	                c = the previous window's count, clock
//	token_bucket:   tat = each limit's theoretical arrival time (Unix ms;
//	                the bucket is full at or after it), clock
//
// lost counts unknown hits that may still take effect (see state). clock is
// the earliest FSM time (Unix ms) the last definite op on the key can have
// been applied at: the FSM clock never runs backwards, so later ops were
// applied at clock or after. ver is the newest policy version an answer on
// the key reported; later ops cannot have seen an older one.
type kstate struct {
	ver     int32
	lost    int32
	clock   int64
	a, b, c int64
	tat     [maxLimits]int64
}

// gstate is one possible state of a group: its keys' states, in the
// group's key order.
type gstate [maxGroup]kstate

// gset is every state a group may be in after a prefix of a
// linearization, sorted, without duplicates, and without states that
// another one dominates (same knowledge, but fewer lost hits left or a
// later clock: whatever the dominated state allows, the other allows too).
type gset []gstate

// keyModel is the sequential specification of one key.
type keyModel struct {
	policy string
	p      Policy
}

// group is one porcupine problem: some keys and every op on them.
type group struct {
	keys   []string
	models []keyModel
	ops    []Op
}

func (g *group) name() string { return strings.Join(g.keys, "+") }

func (g *group) index(key string) int { return slices.Index(g.keys, key) }

// obs is one hit's answer, from a single check or one part of a
// multi-key check.
type obs struct {
	allowed    bool // this hit's own answer (for a refused multi: would it have passed)
	counted    bool // it was counted
	remaining  int64
	resetAt    int64
	retryAfter int64
	limits     []LimitResult
}

// step applies one op to every state in the set.
func (g *group) step(set gset, op Op) gset {
	var next []gstate
	for _, st := range set {
		next = append(next, g.stepOne(st, op)...)
	}
	return canonical(next)
}

func (g *group) stepOne(st gstate, op Op) []gstate {
	switch {
	case op.Outcome == OutcomeUnknown && op.Kind == KindMulti:
		// A lost multi-key check may have counted; each key gets one
		// more lost hit. (This does not insist that a lost multi-key
		// check counted in both keys or neither: a weaker check, never
		// a false alarm.)
		for _, p := range op.Parts {
			st[g.index(p.Key)].lost++
		}
		return []gstate{st}
	case op.Outcome == OutcomeUnknown:
		st[g.index(op.Key)].lost++
		return []gstate{st}
	case op.Kind == KindPeek:
		i := g.index(op.Key)
		ks, ok := g.models[i].peek(st[i], op)
		if !ok {
			return nil
		}
		st[i] = ks
		return []gstate{st}
	case op.Kind == KindHit:
		o := obs{allowed: op.Allowed, counted: op.Allowed, remaining: op.Remaining, resetAt: op.ResetAt,
			retryAfter: op.RetryAfterMs, limits: op.Limits}
		return g.stepPart(st, op.Key, o)
	default:
		return g.stepMulti(st, op)
	}
}

// stepMulti applies a multi-key check: allowed only if every hit is, then
// every hit counts; refused if any hit is, then none counts. Hits are
// applied in request order (as the FSM does).
func (g *group) stepMulti(st gstate, op Op) []gstate {
	anyRefused := slices.ContainsFunc(op.Parts, func(p Part) bool { return !p.Allowed })
	if op.Allowed == anyRefused {
		return nil // allowed with a refused hit, or refused with none
	}
	states := []gstate{st}
	for _, p := range op.Parts {
		o := obs{allowed: p.Allowed, counted: op.Allowed, remaining: p.Remaining, resetAt: p.ResetAt,
			retryAfter: p.RetryAfterMs, limits: p.Limits}
		var next []gstate
		for _, s := range states {
			next = append(next, g.stepPart(s, p.Key, o)...)
		}
		states = canonical(next)
		if len(states) == 0 {
			return nil
		}
	}
	return states
}

func (g *group) stepPart(st gstate, key string, o obs) []gstate {
	i := g.index(key)
	var out []gstate
	for _, ks := range g.models[i].hit(st[i], o) {
		st[i] = ks
		out = append(out, st)
	}
	return out
}

// hit returns every state the key may be in after a definite hit.
func (m keyModel) hit(st kstate, o obs) []kstate {
	v := m.p.version(o.limits)
	if v < 0 || int32(v) < st.ver {
		return nil // limits no policy version had, or an older version than already seen
	}
	limits := m.p.Versions[v]
	// A newer version than the key has seen: lost hits may have landed
	// under either, and the newer one allows more, so judging them by
	// it rules nothing out.
	var out []kstate
	switch m.p.Algorithm {
	case FixedWindow:
		out = fixedHit(limits[0], m.p.Align == AlignEpoch, st, o)
	case SlidingWindow:
		out = slidingHit(limits[0], st, o)
	default:
		out = bucketHit(limits, st, o, int32(v) > st.ver)
	}
	for i := range out {
		out[i].ver = int32(v)
	}
	return out
}

func (m keyModel) peek(st kstate, op Op) (kstate, bool) {
	if m.p.Algorithm != FixedWindow {
		return st, false // malformed-op validation keeps these out
	}
	l := m.p.Versions[st.ver][0]
	if n := len(m.p.Versions); n > 1 {
		// A peek does not say which version it read; the newest
		// allows the most.
		l = m.p.Versions[n-1][0]
	}
	s := spec{limit: l.Limit, windowMs: l.WindowMs, aligned: m.p.Align == AlignEpoch}
	next, ok := s.peek(fixedState(st), op)
	return fromFixed(st, next), ok
}

// canonical sorts, dedupes and prunes dominated states.
func canonical(states []gstate) gset {
	slices.SortFunc(states, compareG)
	states = slices.Compact(states)
	out := states[:0]
	for i, s := range states {
		dominated := false
		for j, t := range states {
			if i != j && s != t && dominates(t, s) {
				dominated = true
				break
			}
		}
		if !dominated {
			out = append(out, s)
		}
	}
	return gset(out)
}

func dominates(t, s gstate) bool {
	for i := range t {
		a, b := t[i], s[i]
		if a.lost < b.lost || a.clock > b.clock {
			return false
		}
		a.lost, a.clock, b.lost, b.clock = 0, 0, 0, 0
		if a != b {
			return false
		}
	}
	return true
}

func compareG(x, y gstate) int {
	for i := range x {
		a, b := x[i], y[i]
		for _, d := range [...][2]int64{{int64(a.ver), int64(b.ver)}, {int64(a.lost), int64(b.lost)}, {a.clock, b.clock},
			{a.a, b.a}, {a.b, b.b}, {a.c, b.c}, {a.tat[0], b.tat[0]}, {a.tat[1], b.tat[1]}, {a.tat[2], b.tat[2]}, {a.tat[3], b.tat[3]}} {
			if d[0] != d[1] {
				if d[0] < d[1] {
					return -1
				}
				return 1
			}
		}
	}
	return 0
}

func (g *group) porcupineModel() porcupine.Model {
	return porcupine.Model{
		Init: func() interface{} { return gset{gstate{}} },
		Step: func(st, input, _ interface{}) (bool, interface{}) {
			next := g.step(st.(gset), input.(Op))
			return len(next) > 0, next
		},
		Equal: func(a, b interface{}) bool { return slices.Equal(a.(gset), b.(gset)) },
		Hash: func(st interface{}) uint64 {
			var h uint64 = 14695981039346656037
			mix := func(x int64) { h = (h ^ uint64(x)) * 1099511628211 }
			for _, s := range st.(gset) {
				for _, k := range s {
					mix(int64(k.ver)<<32 | int64(k.lost))
					mix(k.clock)
					mix(k.a)
					mix(k.b)
					mix(k.c)
					for _, t := range k.tat {
						mix(t)
					}
				}
			}
			return h
		},
		DescribeOperation: func(input, _ interface{}) string { return describeOp(input.(Op)) },
		DescribeState:     func(st interface{}) string { return g.describe(st.(gset)) },
		DescribeOperationMetadata: func(info interface{}) string {
			if info == nil {
				return ""
			}
			return info.(string)
		},
	}
}

func (g *group) describe(set gset) string {
	var alts []string
	for _, s := range set {
		var keys []string
		for i, k := range g.keys {
			keys = append(keys, k+": "+g.models[i].describe(s[i]))
		}
		alts = append(alts, strings.Join(keys, "; "))
	}
	return strings.Join(alts, " | or | ")
}

func (m keyModel) describe(k kstate) string {
	var s string
	switch m.p.Algorithm {
	case FixedWindow:
		s = describeState(fixedState(k))
		if k.ver > 0 {
			s += fmt.Sprintf(", policy v%d", k.ver)
		}
		return s
	case SlidingWindow:
		s = fmt.Sprintf("win=%d cur=%d prev=%d", k.a, k.b, k.c)
	default:
		s = fmt.Sprintf("tat=%v", k.tat[:len(m.p.Versions[0])])
	}
	s += fmt.Sprintf(", clock>=%d, policy v%d", k.clock, k.ver)
	if k.lost > 0 {
		s += fmt.Sprintf(", %d unknown hits may still count", k.lost)
	}
	return s
}

func describeOp(op Op) string {
	if op.Kind != KindMulti {
		return op.Key + " " + describeHit(op)
	}
	var parts []string
	for _, p := range op.Parts {
		parts = append(parts, fmt.Sprintf("%s allowed=%v rem=%d reset=%d retry=%d", p.Key, p.Allowed, p.Remaining, p.ResetAt, p.RetryAfterMs))
	}
	if op.Outcome == OutcomeUnknown {
		return "multi -> unknown: " + strings.Join(parts, ", ")
	}
	return fmt.Sprintf("multi -> allowed=%v: %s", op.Allowed, strings.Join(parts, ", "))
}

// groups partitions the ops into groups of keys that multi-key checks tie
// together. It reports groups larger than maxGroup instead of checking
// them.
func groups(byKey map[string][]Op, multis []Op, models map[string]keyModel) ([]*group, []Violation) {
	parent := map[string]string{}
	var find func(string) string
	find = func(k string) string {
		if p, ok := parent[k]; ok && p != k {
			r := find(p)
			parent[k] = r
			return r
		}
		return k
	}
	for k := range byKey {
		parent[k] = k
	}
	for _, op := range multis {
		for _, p := range op.Parts {
			if _, ok := parent[p.Key]; !ok {
				parent[p.Key] = p.Key
			}
			a, b := find(op.Parts[0].Key), find(p.Key)
			if a != b {
				parent[b] = a
			}
		}
	}
	members := map[string][]string{}
	for k := range parent {
		r := find(k)
		members[r] = append(members[r], k)
	}
	var out []*group
	var bad []Violation
	for _, root := range slices.Sorted(maps.Keys(members)) {
		keys := members[root]
		slices.Sort(keys)
		g := &group{keys: keys}
		if len(keys) > maxGroup {
			bad = append(bad, Violation{Check: CheckGroupTooLarge, Key: g.name(),
				Detail: fmt.Sprintf("multi-key checks tie %d keys together; the checker models at most %d", len(keys), maxGroup)})
			continue
		}
		for _, k := range keys {
			g.models = append(g.models, models[k])
			g.ops = append(g.ops, byKey[k]...)
		}
		out = append(out, g)
	}
	for _, op := range multis {
		for _, g := range out {
			if g.index(op.Parts[0].Key) >= 0 {
				g.ops = append(g.ops, op)
			}
		}
	}
	for _, g := range out {
		slices.SortStableFunc(g.ops, func(a, b Op) int {
			if a.Invoke != b.Invoke {
				if a.Invoke < b.Invoke {
					return -1
				}
				return 1
			}
			return a.ID - b.ID
		})
	}
	return out, bad
}
