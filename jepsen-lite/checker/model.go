package checker

import "fmt"

// state is what the model knows about one key after a prefix of a
// linearization.
//
// An unknown hit (the client never learned its outcome) may have counted at
// any time after it was invoked, or never. All unknown hits are alike, so
// rather than guess an effect for each one when it is linearized, the model
// only counts them in lost, and spends some when a later definite answer
// needs hits nobody was told about: extra counts in the current window, or a
// later window that they opened and filled. Spending them only when an answer
// needs them rules nothing out: until something observes the window, an
// effect can always be moved later, and a lost hit never spent is one that
// never counted.
//
// The verdicts are those of the literal model, in which each unknown hit
// stays open until the end of the history and is nothing, +1, or a new window
// of unknown start (TestModelMatchesLiteralSpec compares them), but the state
// stays one small comparable struct instead of a set of guesses that grows
// with every lost hit, which is what lets porcupine finish on real runs.
type state struct {
	start int64 // window start, Unix ms; 0 = no window yet
	count int64 // hits counted in that window
	lost  int64 // unknown hits that may still take effect
}

// spec is the sequential specification of one key of the limiter, derived
// from decide(): fixed windows anchored at a key's first hit, cost 1 per hit,
// refused hits are not counted.
type spec struct {
	limit    int64
	windowMs int64
	// aligned: windows start at multiples of windowMs since the epoch
	// (align: epoch), so an answer's window must too; everything else
	// (a fresh window at least a window after the last) holds as anchored.
	aligned bool
}

// step returns the state after op, or false if op cannot be linearized at
// this point. Unknown peeks never get here: keyHistory drops them.
func (s spec) step(st state, op Op) (state, bool) {
	switch {
	case op.Outcome == OutcomeUnknown:
		st.lost++
		return st, true
	case op.Kind == KindHit:
		return s.hit(st, op)
	default:
		return s.peek(st, op)
	}
}

// hit checks a definite hit (200 or 429), whose window start is read off its
// resetAt and whose count before the hit is read off its remaining.
func (s spec) hit(st state, op Op) (state, bool) {
	start := op.ResetAt - s.windowMs
	if !op.Allowed {
		// A cost-1 hit is only refused by a full window, and is not
		// counted.
		if op.Remaining != 0 {
			return st, false
		}
		return s.observe(st, start, s.limit, s.limit, true)
	}
	before := s.limit - op.Remaining - 1
	if before < 0 || before >= s.limit {
		return st, false
	}
	return s.observe(st, start, before, before+1, true)
}

// peek checks a linearizable status read, which reports the raw stored
// window.
func (s spec) peek(st state, op Op) (state, bool) {
	if op.WindowStart == 0 {
		// No stored window: either there never was one, or it lapsed
		// and was expired by the time the peek was served. Unknown
		// hits cannot explain it either: a window they opened would
		// be later still, so lapse later. The state is kept so the
		// next window is still bounded by this one.
		return st, st.start == 0 || st.start+s.windowMs <= op.AppliedNow
	}
	return s.observe(st, op.WindowStart, op.Used, op.Used, false)
}

// observe checks that the window starting at start can hold exactly before
// counted hits just before an op, spending lost hits to make up the
// difference, and returns the state with after hits in that window. isHit
// says whether the op itself may open the window.
func (s spec) observe(st state, start, before, after int64, isHit bool) (state, bool) {
	if before > s.limit {
		return st, false // lost hits are refused too once the window is full
	}
	if s.aligned && start%s.windowMs != 0 {
		return st, false // not a window an aligned policy has
	}
	switch {
	case st.start != 0 && start == st.start:
		// The current window, plus any number of lost hits.
		extra := before - st.count
		if extra < 0 || extra > st.lost {
			return st, false
		}
		return state{start: start, count: after, lost: st.lost - extra}, true
	case st.start == 0 || start >= st.start+s.windowMs:
		// A later window. decide() only opens one once now - prevStart
		// >= windowMs and the applied clock never runs backwards, so
		// windows are at least one window apart. It was opened either
		// by this hit (a fresh window admits it) or by lost hits,
		// which are then all the window held.
		if (before == 0 && isHit) || (before >= 1 && before <= st.lost) {
			return state{start: start, count: after, lost: st.lost - before}, true
		}
	}
	// An earlier window, one reopened less than a window after the
	// current one, or counts that nothing can explain.
	return st, false
}

// describeHit describes one op of one key for the visualization.
func describeHit(op Op) string {
	switch {
	case op.Outcome == OutcomeUnknown:
		return fmt.Sprintf("hit -> unknown (%s)", op.Error)
	case op.Kind == KindPeek && op.WindowStart == 0:
		return fmt.Sprintf("peek -> no window (appliedNow=%d)", op.AppliedNow)
	case op.Kind == KindPeek:
		return fmt.Sprintf("peek -> win=%d used=%d", op.WindowStart, op.Used)
	}
	s := fmt.Sprintf("hit -> allowed=%v rem=%d reset=%d", op.Allowed, op.Remaining, op.ResetAt)
	if !op.Allowed {
		s += fmt.Sprintf(" retry=%d", op.RetryAfterMs)
	}
	for _, l := range op.Limits {
		s += fmt.Sprintf(" [limit %d: rem=%d reset=%d win=%d]", l.Limit, l.Remaining, l.ResetAt, l.WindowStart)
	}
	return s
}

func describeState(st state) string {
	w := "no window"
	if st.start != 0 {
		w = fmt.Sprintf("win=%d used=%d", st.start, st.count)
	}
	if st.lost > 0 {
		w += fmt.Sprintf(", %d unknown hits may still count", st.lost)
	}
	return w
}

func fixedState(k kstate) state { return state{start: k.a, count: k.b, lost: int64(k.lost)} }

func fromFixed(k kstate, s state) kstate {
	k.a, k.b, k.lost = s.start, s.count, int32(s.lost)
	return k
}

// fixedHit is spec.hit for one key of a policy with limit l. A hit of a
// refused multi-key check that would have passed reports the window as if
// it had counted (it was decided like any other hit), but nothing was
// stored: the model checks it as a hit, then takes the hit back out.
func fixedHit(l Limit, aligned bool, st kstate, o obs) []kstate {
	s := spec{limit: l.Limit, windowMs: l.WindowMs, aligned: aligned}
	op := Op{Kind: KindHit, Outcome: OutcomeOK, Allowed: o.allowed, Remaining: o.remaining, ResetAt: o.resetAt}
	if len(o.limits) == 1 {
		op.Remaining, op.ResetAt = o.limits[0].Remaining, o.limits[0].ResetAt
	}
	fs := fixedState(st)
	if !o.allowed || o.counted {
		next, ok := s.hit(fs, op)
		if !ok {
			return nil
		}
		return []kstate{fromFixed(st, next)}
	}
	// A hit of a refused request that would have passed: its remaining
	// may be told as if it had counted or as it stands (rlnode: as it
	// stands, since nothing was spent); its window is the one it was
	// decided in. Check it as a hit, then take the hit back out.
	var out []kstate
	for _, spent := range []int64{0, 1} {
		op.Remaining -= spent
		next, ok := s.hit(fs, op)
		op.Remaining += spent
		if !ok {
			continue
		}
		if next.start != fs.start && next.count == 1 {
			next = fs // it would have opened the window itself: nothing changed
		} else {
			next.count-- // lost hits it needed did count; it did not
		}
		out = append(out, fromFixed(st, next))
	}
	return out
}
