package checker

import (
	"fmt"
	"maps"
	"slices"
)

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
