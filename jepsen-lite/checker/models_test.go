package checker

import (
	"slices"
	"testing"
	"time"
)

// Policies of the handcrafted histories below. t0 is a multiple of every
// window, so aligned windows start at t0.
var (
	fwPolicy = NewPolicy(FixedWindow, Limit{Limit: 3, WindowMs: 1000})
	swPolicy = NewPolicy(SlidingWindow, Limit{Limit: 3, WindowMs: 1000})
	// two limits: 2 per second (a token every 500ms, burst 2) and 4 per
	// 10s with a burst of 3 (a token every 2500ms)
	tbPolicy = NewPolicy(TokenBucket, Limit{Limit: 2, WindowMs: 1000}, Limit{Limit: 4, WindowMs: 10000, Burst: 3})
	// raised mid-run from 3 to 5 per second
	fwRaised = fwPolicy.Raised(Limit{Limit: 5, WindowMs: 1000})

	// the fixed window aligned to the epoch (align: epoch)
	fePolicy = Policy{Algorithm: FixedWindow, Align: AlignEpoch, Versions: [][]Limit{{{Limit: 3, WindowMs: 1000}}}}

	policyCfg = Config{Timeout: 10 * time.Second, Policies: map[string]Policy{
		"fw": fwPolicy, "sw": swPolicy, "tb": tbPolicy, "fr": fwRaised, "fe": fePolicy}}
)

// ph builds a history on the policies above; every op takes [inv, inv+5].
type ph []Op

func (h ph) add(op Op) ph {
	op.ID = len(h) + 1
	op.Node = "n1"
	op.Return = op.Invoke + 5
	op.Outcome = OutcomeOK
	return append(slices.Clip(h), op) // never write into a shared prefix
}

// at sets the invocation and return of the last op.
func (h ph) at(inv, ret int64) ph {
	h[len(h)-1].Invoke, h[len(h)-1].Return = inv, ret
	return h
}

// lim is one limit's answer.
func lim(limit, rem, reset, start int64) LimitResult {
	return LimitResult{Limit: limit, Remaining: rem, ResetAt: reset, WindowStart: start}
}

// hit is a single check of key (its policy is the part before "/") at
// invocation time inv (ns since the run started; only the order matters).
func (h ph) hit(inv int64, key string, allowed bool, retry int64, limits ...LimitResult) ph {
	pol := key[:slices.Index([]byte(key), '/')]
	top := limits[mostConstraining(limits)]
	return h.add(Op{Client: len(h) % 4, Kind: KindHit, Key: key, Policy: pol, Invoke: inv, Allowed: allowed,
		Remaining: top.Remaining, ResetAt: top.ResetAt, RetryAfterMs: retry, Limits: limits})
}

func (h ph) lost(inv int64, key string) ph {
	pol := key[:slices.Index([]byte(key), '/')]
	h = h.add(Op{Client: len(h) % 4, Kind: KindHit, Key: key, Policy: pol, Invoke: inv, Error: "timeout"})
	h[len(h)-1].Outcome = OutcomeUnknown
	return h
}

func part(key string, allowed bool, retry int64, limits ...LimitResult) Part {
	top := limits[mostConstraining(limits)]
	return Part{Key: key, Policy: key[:slices.Index([]byte(key), '/')], Allowed: allowed,
		Remaining: top.Remaining, ResetAt: top.ResetAt, RetryAfterMs: retry, Limits: limits}
}

func (h ph) multi(inv int64, allowed bool, parts ...Part) ph {
	return h.add(Op{Client: len(h) % 4, Kind: KindMulti, Key: parts[0].Key, Invoke: inv, Allowed: allowed, Parts: parts})
}

func mostConstraining(ls []LimitResult) int {
	best := 0
	for i, l := range ls {
		if l.Remaining < ls[best].Remaining || (l.Remaining == ls[best].Remaining && l.ResetAt > ls[best].ResetAt) {
			best = i
		}
	}
	return best
}

// Sliding window, 3 per 1000ms, one key, ops in sequence. Worked by hand
// from the formula in sliding.go.
var slidingValid = ph{}.
	hit(0, "sw/a", true, 0, lim(3, 2, t0+2000, t0)).
	hit(10, "sw/a", true, 0, lim(3, 1, t0+2000, t0)).
	hit(20, "sw/a", true, 0, lim(3, 0, t0+2000, t0)).
	// at t0+400: full; allowed again when 3*(1000-e)+1000 <= 3000 in the
	// next window, e >= 334: retry 1334-400
	hit(30, "sw/a", false, 934, lim(3, 0, t0+2000, t0)).
	// next window, e=400: 3*600 + 1000 = 2800 <= 3000
	hit(40, "sw/a", true, 0, lim(3, 0, t0+3000, t0+1000)).
	// e=500: 3*500 + 2000 > 3000; allowed from e=667
	hit(50, "sw/a", false, 167, lim(3, 0, t0+3000, t0+1000)).
	// e=700: 3*300 + 2000 = 2900 <= 3000
	hit(60, "sw/a", true, 0, lim(3, 0, t0+3000, t0+1000))

// Token bucket with two limits, one key, ops in sequence. A fresh key is
// full; tat is when each bucket is full again.
var bucketValid = ph{}.
	// n=t0: tat1 = t0+500 (1 left), tat2 = t0+2500 (2 left)
	hit(0, "tb/a", true, 0, lim(2, 1, t0+500, 0), lim(3, 2, t0+2500, 0)).
	// n=t0+10: tat1 = t0+1000 (empty), tat2 = t0+5000
	hit(10, "tb/a", true, 0, lim(2, 0, t0+1000, 0), lim(3, 1, t0+5000, 0)).
	// n=t0+300: limit 1 has no token until t0+500: retry 200 pins n.
	// Limit 2 would allow it, so it reports as if it had counted.
	hit(20, "tb/a", false, 200, lim(2, 0, t0+1000, 0), lim(3, 0, t0+7500, 0)).
	// n=t0+1000: limit 1 full again
	hit(30, "tb/a", true, 0, lim(2, 1, t0+1500, 0), lim(3, 0, t0+7500, 0)).
	// n=t0+2000: limit 1 has room, limit 2 refuses until 2500
	hit(40, "tb/a", false, 500, lim(2, 1, t0+2500, 0), lim(3, 0, t0+7500, 0))

func TestPolicyModels(t *testing.T) {
	tests := []struct {
		name       string
		history    ph
		wantChecks []string // nil = valid
	}{
		{name: "sliding: valid", history: slidingValid},
		{name: "sliding: a lost hit spent in the previous window",
			// refused at the start of the next window: only previous=3
			// explains it (3*(1000-100) + 1000 > 3000), so the lost hit
			// counted in the first window; allowed from e=334
			history: slidingValid[:2].lost(15, "sw/a").
				hit(40, "sw/a", false, 234, lim(3, 0, t0+2000, t0+1000))},
		{name: "sliding: the same answer without the lost hit",
			history: slidingValid[:2].
				hit(40, "sw/a", false, 234, lim(3, 0, t0+2000, t0+1000)),
			wantChecks: []string{CheckLinearizability}},
		{name: "sliding: over-admission while the previous window weighs",
			// previous=3: a third hit in the next window never fits
			// (3*(W-e) + 3W > 3W for every e < W)
			history: slidingValid[:5].
				hit(100, "sw/a", true, 0, lim(3, 0, t0+3000, t0+1000)).
				hit(110, "sw/a", true, 0, lim(3, 0, t0+3000, t0+1000)),
			wantChecks: []string{CheckLinearizability}},
		{name: "sliding: refused though the estimate has room",
			history: slidingValid[:1].
				hit(10, "sw/a", false, 100, lim(3, 0, t0+2000, t0)),
			wantChecks: []string{CheckLinearizability}},
		{name: "sliding: the clock ran backwards (retryAfterMs one more)",
			history: slidingValid[:6].
				hit(70, "sw/a", false, 168, lim(3, 0, t0+3000, t0+1000)), // 1ms before the last one
			wantChecks: []string{CheckLinearizability}},
		{name: "sliding: window moved backwards",
			history: slidingValid[:5].
				hit(100, "sw/a", true, 0, lim(3, 1, t0+2000, t0)),
			wantChecks: []string{CheckLinearizability}},

		{name: "token bucket: valid", history: bucketValid},
		{name: "token bucket: a refill that came too early",
			// after n=t0+300 (pinned by retryAfterMs), limit 1 is
			// empty until t0+500 and full at t0+1000; this answer says
			// it was full at the hit (resetAt = n + 500 with n = t0+300)
			history: bucketValid[:3].
				hit(30, "tb/a", true, 0, lim(2, 1, t0+800, 0), lim(3, 0, t0+7500, 0)),
			wantChecks: []string{CheckLinearizability}},
		{name: "token bucket: second limit ignored",
			// limit 2 holds no token at t0+2000 (full at t0+7500, burst 3 = 7500ms)
			history: bucketValid[:4].
				hit(40, "tb/a", true, 0, lim(2, 1, t0+2500, 0), lim(3, 0, t0+10000, 0)),
			wantChecks: []string{CheckLinearizability}},
		{name: "token bucket: a lost hit explains a level",
			// the lost hit took limit 1's token due at t0+500; at
			// n=t0+600 limit 1 waits until t0+1000, limit 2 until t0+2500
			history: bucketValid[:2].lost(15, "tb/a").
				hit(20, "tb/a", false, 1900, lim(2, 0, t0+1500, 0), lim(3, 0, t0+7500, 0))},
		{name: "token bucket: a lost hit cannot spend a token before it is there",
			// the same levels at n=t0+300 (retry 2200): the lost hit
			// would have needed limit 1's token before t0+500
			history: bucketValid[:2].lost(15, "tb/a").
				hit(20, "tb/a", false, 2200, lim(2, 0, t0+1500, 0), lim(3, 0, t0+7500, 0)),
			wantChecks: []string{CheckLinearizability}},
		{name: "token bucket: lost hits applied at different times",
			// Found by a 5-node run: a follower kept forwarding two hits
			// its client had given up on, and the new leader applied them
			// in two entries. One at t0+2600 (limit 1 full again, limit 2
			// too): tat1 = t0+3100, tat2 = t0+5100; one at t0+3500: tat1
			// = t0+4000, tat2 = t0+7600. No single instant gives both
			// levels (tat2 = t0+7600 puts it at t0+2600, and then tat1
			// would be t0+3600). At n=t0+3600 both limits allow a hit.
			history: bucketValid[:1].lost(10, "tb/a").lost(20, "tb/a").
				hit(30, "tb/a", true, 0, lim(2, 0, t0+4500, 0), lim(3, 0, t0+10100, 0))},
		{name: "token bucket: the same levels without the lost hits",
			history: bucketValid[:1].
				hit(30, "tb/a", true, 0, lim(2, 0, t0+4500, 0), lim(3, 0, t0+10100, 0)),
			wantChecks: []string{CheckLinearizability}},
		{name: "token bucket: one lost hit cannot make two hits' levels",
			history: bucketValid[:1].lost(10, "tb/a").
				hit(30, "tb/a", true, 0, lim(2, 0, t0+4500, 0), lim(3, 0, t0+10100, 0)),
			wantChecks: []string{CheckLinearizability}},
		{name: "multi: allowed counts in both keys",
			history: ph{}.multi(0, true, part("fw/a", true, 0, lim(3, 2, t0+1000, t0)), part("tb/a", true, 0, lim(2, 1, t0+500, 0), lim(3, 2, t0+2500, 0))).
				hit(10, "fw/a", true, 0, lim(3, 1, t0+1000, t0)).
				hit(20, "tb/a", true, 0, lim(2, 0, t0+1000, 0), lim(3, 1, t0+5000, 0))},
		{name: "multi: refused counts in neither key",
			history: bucketValid[:2].
				hit(3, "fw/a", true, 0, lim(3, 2, t0+1000, t0)).
				// n=t0+300: tb refuses; fw would have passed (told as if counted)
				multi(20, false, part("fw/a", true, 0, lim(3, 1, t0+1000, t0)), part("tb/a", false, 200, lim(2, 0, t0+1000, 0), lim(3, 0, t0+7500, 0))).
				hit(30, "fw/a", true, 0, lim(3, 1, t0+1000, t0))},
		{name: "multi: non-atomic, one key counted and the other did not",
			history: bucketValid[:2].
				hit(3, "fw/a", true, 0, lim(3, 2, t0+1000, t0)).
				multi(20, false, part("fw/a", true, 0, lim(3, 1, t0+1000, t0)), part("tb/a", false, 200, lim(2, 0, t0+1000, 0), lim(3, 0, t0+7500, 0))).
				hit(30, "fw/a", true, 0, lim(3, 0, t0+1000, t0)),
			wantChecks: []string{CheckLinearizability}},
		{name: "multi: allowed with a refused hit",
			history:    ph{}.multi(0, true, part("fw/a", true, 0, lim(3, 2, t0+1000, t0)), part("sw/a", false, 5, lim(3, 0, t0+2000, t0))),
			wantChecks: []string{CheckLinearizability}},

		{name: "raised limit: the new limit applies in an open window",
			history: ph{}.hit(0, "fr/a", true, 0, lim(3, 2, t0+1000, t0)).
				hit(10, "fr/a", true, 0, lim(3, 1, t0+1000, t0)).
				hit(20, "fr/a", true, 0, lim(3, 0, t0+1000, t0)).
				hit(30, "fr/a", false, 900, lim(3, 0, t0+1000, t0)).
				hit(40, "fr/a", true, 0, lim(5, 1, t0+1000, t0)).
				hit(50, "fr/a", true, 0, lim(5, 0, t0+1000, t0))},
		{name: "raised limit: an old limit after the new one",
			history: ph{}.hit(0, "fr/a", true, 0, lim(5, 4, t0+1000, t0)).
				hit(10, "fr/a", true, 0, lim(3, 1, t0+1000, t0)),
			wantChecks: []string{CheckLinearizability}},
		{name: "raised limit: over-admission past the new limit",
			history: ph{}.hit(0, "fr/a", true, 0, lim(5, 4, t0+1000, t0)).
				hit(10, "fr/a", true, 0, lim(5, 3, t0+1000, t0)).
				hit(20, "fr/a", true, 0, lim(5, 2, t0+1000, t0)).
				hit(30, "fr/a", true, 0, lim(5, 1, t0+1000, t0)).
				hit(40, "fr/a", true, 0, lim(5, 0, t0+1000, t0)).
				hit(50, "fr/a", true, 0, lim(5, 0, t0+1000, t0)),
			wantChecks: []string{CheckNeverMoreThanN, CheckDistinctRemaining, CheckLinearizability}},
		{name: "aligned: windows on multiples of the window",
			history: ph{}.hit(0, "fe/a", true, 0, lim(3, 2, t0+1000, t0)).
				hit(10, "fe/a", true, 0, lim(3, 1, t0+1000, t0)).
				hit(20, "fe/a", true, 0, lim(3, 2, t0+2000, t0+1000))},
		{name: "aligned: a window anchored off the boundary",
			history: ph{}.hit(0, "fe/a", true, 0, lim(3, 2, t0+1000, t0)).
				hit(10, "fe/a", true, 0, lim(3, 2, t0+2300, t0+1300)),
			wantChecks: []string{CheckLinearizability}},
		{name: "limits no version had",
			history:    ph{}.hit(0, "fr/a", true, 0, lim(4, 3, t0+1000, t0)),
			wantChecks: []string{CheckMalformed}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Check(policyCfg, tt.history)
			var got []string
			for _, v := range res.Violations {
				got = append(got, v.Check)
			}
			if res.Valid != (tt.wantChecks == nil) || !slices.Equal(sortedCopy(got), sortedCopy(tt.wantChecks)) {
				t.Fatalf("valid=%v violations=%+v keys=%+v; want checks %v", res.Valid, res.Violations, res.Keys, tt.wantChecks)
			}
		})
	}
}

// A multi-key check ties its keys into one group; other keys stay apart.
func TestGroups(t *testing.T) {
	h := ph{}.hit(0, "fw/a", true, 0, lim(3, 2, t0+1000, t0)).
		hit(1, "sw/b", true, 0, lim(3, 2, t0+2000, t0)).
		multi(2, true, part("fw/a", true, 0, lim(3, 1, t0+1000, t0)), part("tb/a", true, 0, lim(2, 1, t0+500, 0), lim(3, 2, t0+2500, 0)))
	res := Check(policyCfg, h)
	want := []KeyResult{{Key: "fw/a+tb/a", Ops: 2, Linearizable: LinOK}, {Key: "sw/b", Ops: 1, Linearizable: LinOK}}
	if !res.Valid || !slices.Equal(res.Keys, want) {
		t.Fatalf("keys %+v violations %+v, want %+v", res.Keys, res.Violations, want)
	}

	// a third key tied in is more than the checker models
	h = h.multi(3, true, part("tb/a", true, 0, lim(2, 0, t0+1000, 0), lim(3, 1, t0+5000, 0)), part("sw/b", true, 0, lim(3, 1, t0+2000, t0)))
	res = Check(policyCfg, h)
	if res.Valid || !slices.ContainsFunc(res.Violations, func(v Violation) bool { return v.Check == CheckGroupTooLarge }) {
		t.Fatalf("three tied keys: violations %+v", res.Violations)
	}
}
