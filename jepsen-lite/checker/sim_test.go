package checker

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// refServer is a reference rate limiter written forward, the plain way,
// straight from the window contract: it knows the clock. The models reason
// backwards from answers, so histories it records are what the models must
// accept, and histories it records with a bug planted are what they must
// reject. Its token bucket keeps tokens as a level in units of 1/W (not an
// arrival time as the model does), so the two are written independently.
type refServer struct {
	pols map[string]Policy
	ver  map[string]int
	keys map[string]*refState
	bug  string
}

type refState struct {
	start, count      int64 // fixed window
	sStart, cur, prev int64 // sliding window
	level, at         [maxLimits]int64
	seen              bool
}

// Planted bugs.
const (
	bugNone          = ""
	bugFixedOver     = "fixed window admits limit+1"
	bugSlidingNoPrev = "sliding window ignores the previous window"
	bugBucketEarly   = "token bucket hands out a token 40ms early"
	bugNonAtomic     = "multi-key check counts the hits that passed"
)

func newRefServer(pols map[string]Policy, bug string) *refServer {
	return &refServer{pols: pols, ver: map[string]int{}, keys: map[string]*refState{}, bug: bug}
}

func (s *refServer) state(key string) *refState {
	st := s.keys[key]
	if st == nil {
		st = &refState{}
		s.keys[key] = st
	}
	return st
}

// decide answers one hit at now; commit stores its effect.
func (s *refServer) decide(policy, key string, now int64) (Part, func()) {
	p := s.pols[policy]
	limits := p.Versions[s.ver[policy]]
	st := s.state(key)
	part := Part{Key: key, Policy: policy}
	var commit func()
	switch p.Algorithm {
	case FixedWindow:
		l := limits[0]
		start, count := st.start, st.count
		if start == 0 || now-start >= l.WindowMs {
			start, count = now, 0
		}
		part.Allowed = count < l.Limit || (s.bug == bugFixedOver && count == l.Limit)
		after := count
		if part.Allowed {
			after++
		}
		part.Remaining, part.ResetAt = max(0, l.Limit-after), start+l.WindowMs
		if !part.Allowed {
			part.RetryAfterMs = part.ResetAt - now
		}
		part.Limits = []LimitResult{{Limit: l.Limit, WindowMs: l.WindowMs, Remaining: part.Remaining, ResetAt: part.ResetAt, WindowStart: start}}
		commit = func() { st.start, st.count = start, after }
	case SlidingWindow:
		l := limits[0]
		W, L := l.WindowMs, l.Limit
		cs := now - now%W
		cur, prev := slidingNorm(st, cs, W)
		allowedAt := func(t int64) bool {
			c, pv := cur, prev
			ws := cs
			if t >= cs+W {
				ws = t - t%W
				c, pv = 0, 0
				if ws == cs+W {
					pv = cur
				}
			}
			if s.bug == bugSlidingNoPrev {
				pv = 0
			}
			return pv*(W-(t-ws))+(c+1)*W <= L*W
		}
		part.Allowed = allowedAt(now)
		after := cur
		if part.Allowed {
			after++
		}
		e := now - cs
		n := int64(0)
		for prev*(W-e)+(after+n+1)*W <= L*W {
			n++
		}
		part.Remaining = n
		switch {
		case after > 0:
			part.ResetAt = cs + 2*W
		case prev > 0:
			part.ResetAt = cs + W
		default:
			part.ResetAt = now
		}
		if !part.Allowed {
			d := int64(1)
			for !allowedAt(now + d) {
				d++
			}
			part.RetryAfterMs = d
		}
		part.Limits = []LimitResult{{Limit: L, WindowMs: W, Remaining: part.Remaining, ResetAt: part.ResetAt, WindowStart: cs}}
		commit = func() { st.sStart, st.cur, st.prev = cs, after, prev }
	default:
		part, commit = s.bucket(limits, st, part, now)
	}
	return part, commit
}

func slidingNorm(st *refState, cs, W int64) (cur, prev int64) {
	switch st.sStart {
	case cs:
		return st.cur, st.prev
	case cs - W:
		return 0, st.cur
	}
	return 0, 0
}

func (s *refServer) bucket(limits []Limit, st *refState, part Part, now int64) (Part, func()) {
	var lv [maxLimits]int64
	part.Allowed = true
	early := int64(0)
	if s.bug == bugBucketEarly {
		early = 40
	}
	for i, l := range limits {
		B := l.capacity(TokenBucket)
		if !st.seen {
			st.level[i], st.at[i] = B*l.WindowMs, now
		}
		lv[i] = min(B*l.WindowMs, st.level[i]+(now-st.at[i])*l.Limit)
		if lv[i]+early*l.Limit < l.WindowMs {
			part.Allowed = false
		}
	}
	st.seen = true
	for i, l := range limits {
		B := l.capacity(TokenBucket)
		after := lv[i]
		if lv[i]+early*l.Limit >= l.WindowMs {
			after -= l.WindowMs // this limit allows it: decided as if it counted
		}
		r := LimitResult{Limit: B, WindowMs: l.WindowMs, Remaining: max(0, floorDiv(after, l.WindowMs)),
			ResetAt: now + ceilDiv(B*l.WindowMs-after, l.Limit)}
		if !part.Allowed && after != lv[i] {
			r.Remaining++ // as rlnode does: nothing was spent
		}
		part.Limits = append(part.Limits, r)
		if lv[i] < l.WindowMs && !part.Allowed {
			part.RetryAfterMs = max(part.RetryAfterMs, ceilDiv(l.WindowMs-lv[i], l.Limit))
		}
	}
	top := part.Limits[mostConstraining(part.Limits)]
	part.Remaining, part.ResetAt = top.Remaining, top.ResetAt
	return part, func() {
		for i, l := range limits {
			st.level[i], st.at[i] = lv[i]-l.WindowMs, now
		}
	}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func ceilDiv(a, b int64) int64 { return -floorDiv(-a, b) }

// raise moves every policy with a newer version to it. A bucket keeps the
// time at which it will be full, as rlnode does, so a shorter refill
// interval may leave it below empty (how a bucket carries over is the
// server's choice; the model takes the level from the next answer).
func (s *refServer) raise() {
	for name, p := range s.pols {
		if s.ver[name]+1 >= len(p.Versions) {
			continue
		}
		s.ver[name]++
		if p.Algorithm != TokenBucket {
			continue
		}
		for key, st := range s.keys {
			if key[:len(name)+1] != name+"/" || !st.seen {
				continue
			}
			prev := p.Versions[s.ver[name]-1]
			for i, l := range p.Versions[s.ver[name]] {
				o := prev[i]
				missingMs := ceilDiv(o.capacity(TokenBucket)*o.WindowMs-st.level[i], o.Limit)
				st.level[i] = l.capacity(TokenBucket)*l.WindowMs - missingMs*l.Limit
			}
		}
	}
}

// apply runs one op of a simulated history at now and fills in its answer.
func (s *refServer) apply(op *Op, now int64) {
	switch op.Kind {
	case KindPeek:
		st := s.state(op.Key)
		op.AppliedNow = now
		l := s.pols[op.Policy].Versions[s.ver[op.Policy]][0]
		if st.start != 0 && (now-st.start < l.WindowMs || now%2 == 0) { // a lapsed window may or may not be expired yet
			op.WindowStart, op.Used = st.start, st.count
		}
	case KindHit:
		p, commit := s.decide(op.Policy, op.Key, now)
		if p.Allowed {
			commit()
		}
		op.Allowed, op.Remaining, op.ResetAt, op.RetryAfterMs, op.Limits = p.Allowed, p.Remaining, p.ResetAt, p.RetryAfterMs, p.Limits
	case KindMulti:
		op.Allowed = true
		var commits []func()
		for i, q := range op.Parts {
			p, commit := s.decide(q.Policy, q.Key, now)
			op.Parts[i] = p
			op.Allowed = op.Allowed && p.Allowed
			if p.Allowed || s.bug != bugNonAtomic {
				commits = append(commits, commit)
			}
		}
		if op.Allowed || s.bug == bugNonAtomic {
			for _, c := range commits {
				c()
			}
		}
		if !op.Allowed {
			// As rlnode does: a hit that would have passed tells its
			// remaining as it stands (nothing was spent), its window
			// and resetAt as decided.
			for i := range op.Parts {
				p := &op.Parts[i]
				if !p.Allowed {
					continue
				}
				p.Remaining++
				for k := range p.Limits {
					p.Limits[k].Remaining++
				}
			}
		}
	}
}

// simPolicies: windows short enough that a simulated run crosses many,
// every policy raised once mid-run.
var simPolicies = map[string]Policy{
	"fw": NewPolicy(FixedWindow, Limit{Limit: 3, WindowMs: 200}).Raised(Limit{Limit: 5, WindowMs: 200}),
	"sw": NewPolicy(SlidingWindow, Limit{Limit: 3, WindowMs: 200}).Raised(Limit{Limit: 5, WindowMs: 200}),
	"tb": NewPolicy(TokenBucket, Limit{Limit: 2, WindowMs: 200}, Limit{Limit: 4, WindowMs: 1000, Burst: 3}).
		// the second limit refills faster but holds fewer ms: buckets may
		// be below empty right after the change
		Raised(Limit{Limit: 4, WindowMs: 200}, Limit{Limit: 10, WindowMs: 1000, Burst: 4}),
}

// simKeys and simPairs: the multi-key checks go across the pairs.
var (
	simKeys  = []string{"fw/a", "tb/a", "sw/b", "tb/b", "sw/c"}
	simPairs = [][2]string{{"fw/a", "tb/a"}, {"sw/b", "tb/b"}}
)

// simulatePolicies records a history of srv under concurrent clients:
// each op takes effect at a random instant inside its interval, in that
// order, on a clock that follows those instants (1µs of run time per ms).
// Some ops lose their answer; half of those still take effect, possibly
// long after the client gave up. The policies are raised halfway.
func simulatePolicies(seed uint64, srv *refServer, workers, opsPerWorker int) history {
	rng := rand.New(rand.NewPCG(seed, 7))
	type event struct {
		at    int64
		index int // into ops; -1 = the policy change
	}
	var ops history
	var events []event
	var end int64
	for w := range workers {
		t := int64(rng.IntN(1000))
		for range opsPerWorker {
			op := Op{Client: w, Node: "n1", Kind: KindHit, Outcome: OutcomeOK, Invoke: t}
			key := simKeys[rng.IntN(len(simKeys))]
			switch r := rng.IntN(10); {
			case r < 2:
				pair := simPairs[rng.IntN(len(simPairs))]
				op.Kind, key = KindMulti, pair[0]
				for _, k := range pair {
					op.Parts = append(op.Parts, Part{Key: k, Policy: k[:2]})
				}
			case r < 3 && key[:2] == "fw":
				op.Kind = KindPeek
			}
			op.Key, op.Policy = key, key[:2]
			if op.Kind == KindMulti {
				op.Policy = ""
			}
			op.Return = t + 1000 + rng.Int64N(50_000)
			at := op.Invoke + rng.Int64N(op.Return-op.Invoke+1)
			if rng.Float64() < 0.05 {
				op.Outcome = OutcomeUnknown
				at += rng.Int64N(100_000)
				if rng.IntN(2) == 0 {
					at = -1
				}
			}
			op.ID = len(ops) + 1
			if at >= 0 {
				events = append(events, event{at, len(ops)})
			}
			ops = append(ops, op)
			end = max(end, op.Return)
			t = op.Return + int64(rng.IntN(20_000))
		}
	}
	events = append(events, event{end / 2, -1})
	slices.SortFunc(events, func(a, b event) int { return cmp.Compare(a.at, b.at) })
	for _, e := range events {
		if e.index < 0 {
			srv.raise()
			continue
		}
		op := &ops[e.index]
		srv.apply(op, t0+e.at/1000)
		if op.Outcome == OutcomeUnknown {
			lostOp := Op{ID: op.ID, Client: op.Client, Node: op.Node, Kind: op.Kind, Key: op.Key, Policy: op.Policy,
				Invoke: op.Invoke, Return: op.Return, Outcome: OutcomeUnknown, Error: "timeout"}
			for _, p := range op.Parts {
				lostOp.Parts = append(lostOp.Parts, Part{Key: p.Key, Policy: p.Policy})
			}
			*op = lostOp
		}
	}
	return ops
}

var simCfg = Config{Policies: simPolicies, Timeout: 20 * time.Second}

// Long histories of a correct limiter pass; each planted bug is caught.
func TestSimulatedPolicyRuns(t *testing.T) {
	for seed := range uint64(4) {
		h := simulatePolicies(seed, newRefServer(simPolicies, bugNone), 6, 120)
		res := Check(simCfg, h)
		if !res.Valid {
			t.Fatalf("seed %d: correct run judged invalid: %+v", seed, res.Violations)
		}
		c := res.Counts
		if c.Refused < 50 || c.Unknown == 0 || c.Multi < 50 || c.Allowed < 100 {
			t.Fatalf("seed %d: simulation too tame: %+v", seed, c)
		}
		for _, bug := range []string{bugFixedOver, bugSlidingNoPrev, bugBucketEarly, bugNonAtomic} {
			h := simulatePolicies(seed, newRefServer(simPolicies, bug), 6, 120)
			if res := Check(simCfg, h); res.Valid {
				t.Errorf("seed %d: %s: not caught (%+v)", seed, bug, res.Counts)
			}
		}
	}
}
