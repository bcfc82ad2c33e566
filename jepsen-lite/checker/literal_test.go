package checker

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/anishathalye/porcupine"
)

// literalSpec is the checker's specification written the plain way, as a
// reference: an unknown hit is an op that stays open until the end of the
// history and, once linearized, has not happened, counted in the current
// window, or opened a new window whose start is only bounded from below. It
// needs porcupine to track every subset of open unknown ops and a set of
// guessed states, which is too slow for real runs but fine for small
// histories, so it is the oracle for the model the checker uses.
type literalSpec struct{ limit, windowMs int64 }

// guess is one possible window. When pending, start is only a lower bound.
type guess struct {
	start, count int64
	pending      bool
}

func (g guess) none() bool { return !g.pending && g.start == 0 }

func (s literalSpec) step(g guess, op Op) []guess {
	if op.Outcome == OutcomeUnknown {
		next := []guess{g}
		if !g.none() && g.count < s.limit {
			next = append(next, guess{g.start, g.count + 1, g.pending})
		}
		var lower int64
		if !g.none() {
			lower = g.start + s.windowMs
		}
		return append(next, guess{lower, 1, true})
	}
	if op.Kind == KindPeek {
		if op.WindowStart == 0 {
			if g.none() || g.start+s.windowMs <= op.AppliedNow {
				return []guess{g}
			}
			return nil
		}
		if op.Used == g.count && (g.pending && op.WindowStart >= g.start || !g.pending && !g.none() && op.WindowStart == g.start) {
			return []guess{{op.WindowStart, g.count, false}}
		}
		return nil
	}
	start := op.ResetAt - s.windowMs
	var next []guess
	same := g.pending && start >= g.start || !g.pending && !g.none() && start == g.start
	if same && op.Allowed && g.count < s.limit && op.Remaining == s.limit-g.count-1 {
		next = append(next, guess{start, g.count + 1, false})
	}
	if same && !op.Allowed && g.count == s.limit && op.Remaining == 0 {
		next = append(next, guess{start, g.count, false})
	}
	if (g.none() || start >= g.start+s.windowMs) && op.Allowed && op.Remaining == s.limit-1 {
		next = append(next, guess{start, 1, false})
	}
	return next
}

func (s literalSpec) model() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{guess{}} },
		Step: func(st, in, _ interface{}) []interface{} {
			var out []interface{}
			for _, g := range s.step(st.(guess), in.(Op)) {
				out = append(out, g)
			}
			return out
		},
	}
	return nm.ToModel()
}

// literalHistory gives unknown hits a return after everything else, as
// Jepsen does, and drops unknown peeks.
func literalHistory(ops []Op) []porcupine.Operation {
	var end int64
	for _, op := range ops {
		end = max(end, op.Return+1)
	}
	var hist []porcupine.Operation
	for _, op := range ops {
		ret := op.Return
		if op.Outcome == OutcomeUnknown {
			if op.Kind == KindPeek {
				continue
			}
			ret = end
		}
		hist = append(hist, porcupine.Operation{ClientId: op.Client, Input: op, Call: op.Invoke, Return: ret})
	}
	return hist
}

// mutate changes one answer of a history the way a buggy cluster might.
func mutate(rng *rand.Rand, h history) history {
	out := append(history(nil), h...)
	for {
		op := &out[rng.IntN(len(out))]
		if op.Outcome != OutcomeOK {
			continue
		}
		d := []int64{-1, 1}[rng.IntN(2)]
		switch k := rng.IntN(4); {
		case op.Kind == KindHit && k == 0:
			op.Allowed = !op.Allowed
		case op.Kind == KindHit && k == 1:
			op.Remaining += d
		case op.Kind == KindHit:
			op.ResetAt += d * winMs / int64(k) // half or whole window
		case k == 0:
			op.WindowStart, op.Used = 0, 0
		case k == 1:
			op.Used += d
		case k == 2 && op.WindowStart != 0:
			op.WindowStart += d * winMs / 2
		default:
			op.AppliedNow -= winMs
		}
		return out
	}
}

// The checker's model must give the same verdict as the literal one on
// every history, right or wrong.
func TestModelMatchesLiteralSpec(t *testing.T) {
	g := &group{keys: []string{"sim"}, models: []keyModel{{policy: DefaultPolicy, p: NewPolicy(FixedWindow, Limit{Limit: limit, WindowMs: winMs})}}}
	fast := g.porcupineModel()
	slow := literalSpec{limit: limit, windowMs: winMs}.model()
	rng := rand.New(rand.NewPCG(42, 42))
	var ok, illegal int
	for i := range 600 {
		h := simulate(uint64(i), 3, 5, 0.3, 20)
		if i%3 != 0 {
			h = mutate(rng, h)
		}
		want := porcupine.CheckOperations(slow, literalHistory(h))
		got := porcupine.CheckOperations(fast, groupHistory(h))
		if got != want {
			t.Fatalf("history %d: checker says linearizable=%v, literal spec says %v\n%s", i, got, want, dump(h))
		}
		if want {
			ok++
		} else {
			illegal++
		}
	}
	t.Logf("%d linearizable, %d not", ok, illegal)
	if ok < 100 || illegal < 100 {
		t.Fatalf("cases too one-sided to compare: %d linearizable, %d not", ok, illegal)
	}
}

func dump(h history) string {
	var s string
	for _, op := range h {
		s += fmt.Sprintf("%+v\n", op)
	}
	return s
}
