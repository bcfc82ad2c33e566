package checker

import (
	"cmp"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

const (
	limit = 3
	winMs = 1000
	t0    = int64(1_700_000_000_000) // window A, Unix ms
)

var cfg = Config{Limit: limit, WindowMs: winMs, Timeout: 10 * time.Second}

// history builds ops with ids in order, so the tables stay readable.
type history []Op

func (h history) add(op Op) history {
	op.ID = len(h) + 1
	if op.Key == "" {
		op.Key = "alice"
	}
	op.Node = "n1"
	return append(h, op)
}

// allow is a definite 200 in the window starting at start.
func (h history) allow(client int, inv, ret, start, remaining int64) history {
	return h.add(Op{Client: client, Kind: KindHit, Invoke: inv, Return: ret, Outcome: OutcomeOK,
		Allowed: true, Remaining: remaining, ResetAt: start + winMs})
}

// refuse is a definite 429 in the window starting at start.
func (h history) refuse(client int, inv, ret, start int64) history {
	return h.add(Op{Client: client, Kind: KindHit, Invoke: inv, Return: ret, Outcome: OutcomeOK,
		ResetAt: start + winMs})
}

func (h history) peek(client int, inv, ret, windowStart, used, appliedNow int64) history {
	return h.add(Op{Client: client, Kind: KindPeek, Invoke: inv, Return: ret, Outcome: OutcomeOK,
		WindowStart: windowStart, Used: used, AppliedNow: appliedNow})
}

func (h history) lost(client int, kind Kind, inv, gaveUp int64) history {
	return h.add(Op{Client: client, Kind: kind, Invoke: inv, Return: gaveUp, Outcome: OutcomeUnknown,
		Error: "context deadline exceeded"})
}

// forKey moves every op to key.
func (h history) forKey(key string) history {
	out := slices.Clone(h)
	for i := range out {
		out[i].Key = key
	}
	return out
}

func concat(hs ...history) history {
	var out history
	for _, h := range hs {
		for _, op := range h {
			op.ID = len(out) + 1
			out = append(out, op)
		}
	}
	return out
}

// validRun: several windows, concurrent overlapping hits, refusals at the
// limit, peeks that see completed hits, windows opening one and more than
// one window later.
var validRun = history{}.
	// window A: three concurrent hits, linearized as 1, 3, 2
	allow(0, 0, 10, t0, 2).
	allow(1, 5, 20, t0, 0).
	allow(2, 6, 15, t0, 1).
	refuse(0, 25, 30, t0).
	peek(1, 31, 35, t0, 3, t0+100).
	refuse(2, 32, 40, t0). // concurrent with the peek
	// window A lapsed and was expired
	peek(0, 50, 55, 0, 0, t0+1200).
	// window B, more than one window after A
	allow(0, 60, 70, t0+1500, 2).
	allow(1, 65, 80, t0+1500, 1).
	peek(2, 85, 90, t0+1500, 2, t0+1600).
	// window C, exactly one window after B
	allow(0, 100, 110, t0+2500, 2).
	peek(1, 100, 120, t0+2500, 1, t0+2600) // concurrent with its hit

func TestCheck(t *testing.T) {
	tests := []struct {
		name       string
		cfg        Config
		history    history
		valid      bool
		wantChecks []string // every one must be reported; nothing else may be
	}{
		{name: "valid run", history: validRun, valid: true},
		{name: "valid run on two keys", history: concat(validRun, validRun.forKey("bob")), valid: true},
		{name: "never-seen key peeked", history: history{}.peek(0, 0, 5, 0, 0, t0).allow(0, 10, 20, t0, 2), valid: true},
		{name: "peek of the same window during a concurrent hit",
			// the peek may linearize before or after the hit
			history: history{}.allow(0, 0, 5, t0, 2).allow(1, 10, 30, t0, 1).peek(2, 12, 20, t0, 1, t0+10),
			valid:   true},
		{name: "peek sees no window exactly when it lapses",
			history: history{}.allow(0, 0, 5, t0, 2).peek(0, 10, 20, 0, 0, t0+winMs).allow(0, 30, 40, t0+winMs, 2),
			valid:   true},
		{name: "empty history", history: history{}, valid: true},

		{name: "double spend: limit+1 admitted in one window",
			history:    history{}.allow(0, 0, 10, t0, 2).allow(1, 0, 10, t0, 1).allow(2, 0, 10, t0, 0).allow(3, 0, 10, t0, 0),
			wantChecks: []string{CheckNeverMoreThanN, CheckDistinctRemaining, CheckLinearizability}},
		{name: "refused before the window is full",
			history:    history{}.allow(0, 0, 10, t0, 2).refuse(0, 20, 30, t0),
			wantChecks: []string{CheckLinearizability}},
		{name: "stale read: peek misses a completed hit",
			history:    history{}.allow(0, 0, 10, t0, 2).allow(0, 15, 18, t0, 1).peek(1, 20, 30, t0, 1, t0+20),
			wantChecks: []string{CheckLinearizability}},
		{name: "stale read: peek sees no window while it is open",
			history:    history{}.allow(0, 0, 10, t0, 2).peek(1, 20, 30, 0, 0, t0+50),
			wantChecks: []string{CheckLinearizability}},
		{name: "window reopened early",
			history:    history{}.allow(0, 0, 10, t0, 2).allow(0, 20, 30, t0+winMs-1, 2),
			wantChecks: []string{CheckLinearizability}},
		{name: "new window that does not start fresh",
			history:    history{}.allow(0, 0, 10, t0, 2).allow(0, 20, 30, t0+1500, 1),
			wantChecks: []string{CheckLinearizability}},
		{name: "window moved backwards",
			history:    history{}.allow(0, 0, 10, t0+5000, 2).allow(0, 20, 30, t0, 2),
			wantChecks: []string{CheckLinearizability}},
		{name: "duplicate remaining with concurrent hits",
			history:    history{}.allow(0, 0, 10, t0, 2).allow(1, 0, 10, t0, 2),
			wantChecks: []string{CheckDistinctRemaining, CheckLinearizability}},

		{name: "unknown hit that took effect",
			// op 3 says two hits were counted before it: only the lost one can be the other
			history: history{}.allow(0, 0, 5, t0, 2).lost(1, KindHit, 10, 15).allow(0, 20, 30, t0, 0).refuse(0, 40, 50, t0),
			valid:   true},
		{name: "unknown hit that did not take effect",
			history: history{}.allow(0, 0, 5, t0, 2).lost(1, KindHit, 10, 15).
				allow(0, 20, 30, t0, 1).allow(0, 31, 35, t0, 0).refuse(0, 40, 50, t0).peek(0, 51, 60, t0, 3, t0+100),
			valid: true},
		{name: "unknown hit that took effect after the client gave up",
			history: history{}.allow(0, 0, 5, t0, 2).lost(1, KindHit, 10, 15).
				allow(0, 20, 30, t0, 1).peek(0, 40, 45, t0, 2, t0+50).peek(0, 50, 55, t0, 3, t0+60),
			valid: true},
		{name: "unknown hit opened a window seen later",
			history: history{}.allow(0, 0, 5, t0, 2).lost(1, KindHit, 100, 150).
				allow(0, 200, 210, t0+1700, 1).peek(0, 220, 230, t0+1700, 2, t0+1750).allow(2, 240, 250, t0+1700, 0),
			valid: true},
		{name: "unknown hit opened the first window",
			history: history{}.lost(1, KindHit, 0, 50).peek(0, 60, 70, t0, 1, t0+10).allow(0, 80, 90, t0, 1),
			valid:   true},
		{name: "unknown hits: one counted, one opened the next window",
			history: history{}.allow(0, 0, 5, t0, 2).lost(1, KindHit, 10, 20).lost(2, KindHit, 10, 20).
				allow(0, 30, 40, t0, 0).allow(0, 50, 60, t0+2000, 1),
			valid: true},
		{name: "unknown peek is ignored",
			history: history{}.allow(0, 0, 5, t0, 2).lost(1, KindPeek, 6, 50).allow(0, 60, 70, t0, 1),
			valid:   true},
		{name: "unknown hit cannot open a window early",
			history:    history{}.allow(0, 0, 5, t0, 2).lost(1, KindHit, 10, 20).allow(0, 30, 40, t0+500, 1),
			wantChecks: []string{CheckLinearizability}},
		{name: "unknown hit cannot be peeked as a window opened early",
			history:    history{}.allow(0, 0, 5, t0, 2).lost(1, KindHit, 10, 20).peek(0, 30, 40, t0+500, 1, t0+600),
			wantChecks: []string{CheckLinearizability}},
		{name: "a peek pins the start of a window an unknown hit opened",
			history: history{}.allow(0, 0, 5, t0, 2).lost(1, KindHit, 10, 20).
				peek(0, 30, 40, t0+1700, 1, t0+1750).allow(0, 50, 60, t0+1800, 1),
			wantChecks: []string{CheckLinearizability}},
		{name: "unknown hit cannot explain two missing counts",
			cfg:        Config{Limit: 4, WindowMs: winMs},
			history:    history{}.allow(0, 0, 5, t0, 3).lost(1, KindHit, 10, 20).allow(0, 30, 40, t0, 0),
			wantChecks: []string{CheckLinearizability}},
		{name: "unknown hit cannot take effect before it was invoked",
			history:    history{}.allow(0, 0, 5, t0, 2).allow(0, 10, 20, t0, 0).lost(1, KindHit, 30, 40),
			wantChecks: []string{CheckLinearizability}},
		{name: "one bad key among good ones",
			history:    concat(validRun.forKey("bob"), history{}.allow(0, 0, 5, t0, 2).allow(0, 10, 20, t0, 2).forKey("mallory")),
			wantChecks: []string{CheckDistinctRemaining, CheckLinearizability}},

		{name: "malformed op",
			history: history{}.add(Op{Kind: "put", Outcome: OutcomeOK}).
				add(Op{Kind: KindHit, Outcome: "fail"}).
				add(Op{Kind: KindHit, Outcome: OutcomeOK, Allowed: true, Remaining: 2, Invoke: 10, Return: 5, ResetAt: t0}),
			wantChecks: []string{CheckMalformed, CheckMalformed, CheckMalformed}},
		{name: "bad config", cfg: Config{Limit: 0, WindowMs: winMs}, history: validRun,
			wantChecks: []string{CheckConfig}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.cfg
			if c.WindowMs == 0 && c.Policies == nil {
				c = cfg
			}
			res := Check(c, tt.history)
			var got []string
			for _, v := range res.Violations {
				got = append(got, v.Check)
			}
			if res.Valid != tt.valid || !slices.Equal(sortedCopy(got), sortedCopy(tt.wantChecks)) {
				t.Fatalf("valid=%v violations=%+v keys=%+v; want valid=%v checks=%v",
					res.Valid, res.Violations, res.Keys, tt.valid, tt.wantChecks)
			}
			// the per-key verdict must agree with the violations
			for _, k := range res.Keys {
				want := LinOK
				if slices.ContainsFunc(res.Violations, func(v Violation) bool {
					return v.Key == k.Key && v.Check == CheckLinearizability
				}) {
					want = LinIllegal
				}
				if k.Linearizable != want {
					t.Errorf("key %q: linearizable=%q, want %q", k.Key, k.Linearizable, want)
				}
			}
		})
	}
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

func TestCheckDetails(t *testing.T) {
	h := concat(validRun, history{}.allow(0, 0, 10, t0, 2).allow(1, 0, 10, t0, 1).
		allow(2, 0, 10, t0, 0).allow(3, 0, 10, t0, 0).lost(4, KindHit, 0, 20).forKey("mallory"))
	res := Check(cfg, h)

	c := res.Counts
	if c.Ops != 17 || c.Hits != 13 || c.Peeks != 4 || c.Allowed != 10 || c.Refused != 2 || c.Unknown != 1 {
		t.Errorf("counts = %+v", c)
	}
	wantKeys := []KeyResult{{Key: "alice", Ops: 12, Linearizable: LinOK}, {Key: "mallory", Ops: 5, Linearizable: LinIllegal}}
	if !slices.Equal(res.Keys, wantKeys) {
		t.Errorf("keys = %+v, want %+v", res.Keys, wantKeys)
	}
	for _, v := range res.Violations {
		if v.Key != "mallory" {
			t.Errorf("violation on the wrong key: %+v", v)
		}
		switch v.Check {
		case CheckNeverMoreThanN:
			if !slices.Equal(v.OpIDs, []int{13, 14, 15, 16}) {
				t.Errorf("never-more-than-n blames %v, want the four admitted hits", v.OpIDs)
			}
		case CheckDistinctRemaining:
			if !slices.Equal(v.OpIDs, []int{15, 16}) {
				t.Errorf("distinct-remaining blames %v, want 15 and 16", v.OpIDs)
			}
		}
	}
}

// A timeout must never pass for a proof. Provoking one from a real search is
// racy, so this checks the mapping of porcupine's verdicts directly.
func TestKeyVerdict(t *testing.T) {
	tests := []struct {
		in        porcupine.CheckResult
		lin       string
		violation string
	}{
		{porcupine.Ok, LinOK, ""},
		{porcupine.Illegal, LinIllegal, CheckLinearizability},
		{porcupine.Unknown, LinUnknown, CheckLinearizingTimeout},
	}
	g := &group{keys: []string{"k"}, models: []keyModel{{policy: DefaultPolicy, p: NewPolicy(FixedWindow, Limit{Limit: limit, WindowMs: winMs})}},
		ops: make([]Op, 7)}
	for _, tt := range tests {
		kr, v := keyVerdict(cfg, g, tt.in)
		if kr != (KeyResult{Key: "k", Ops: 7, Linearizable: tt.lin}) {
			t.Errorf("%s: key result %+v", tt.in, kr)
		}
		switch {
		case tt.violation == "" && v != nil:
			t.Errorf("%s: unexpected violation %+v", tt.in, v)
		case tt.violation != "" && (v == nil || v.Check != tt.violation || v.Key != "k"):
			t.Errorf("%s: violation %+v, want check %s", tt.in, v, tt.violation)
		}
	}
}

func TestWriteVisualizations(t *testing.T) {
	bad := history{}.allow(0, 0, 5, t0, 2).peek(1, 10, 20, 0, 0, t0+10)
	h := concat(validRun, validRun.forKey("bob"), bad.forKey("mallory/1"))
	dir := filepath.Join(t.TempDir(), "viz")

	paths, err := WriteVisualizations(cfg, h, dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "lin-mallory_1.html")}
	if !slices.Equal(paths, want) {
		t.Fatalf("paths = %v, want %v", paths, want)
	}
	body, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(body) == 0 || !strings.Contains(string(body), "<html") {
		t.Fatalf("visualization is not an HTML page (%d bytes)", len(body))
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("dir holds %d files, want only the invalid key's", len(entries))
	}

	// A valid history writes nothing at all.
	paths, err = WriteVisualizations(cfg, validRun, filepath.Join(t.TempDir(), "none"))
	if err != nil || len(paths) != 0 {
		t.Errorf("valid history: paths=%v err=%v, want none", paths, err)
	}
}

func TestFileNameNeverCollides(t *testing.T) {
	used := map[string]bool{}
	got := []string{fileName("a/b", used), fileName("a:b", used), fileName("../etc", used), fileName("ok-key_1.x", used)}
	want := []string{"lin-a_b.html", "lin-a_b-2.html", "lin-.._etc.html", "lin-ok-key_1.x.html"}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// The model's steps one by one, most of all how lost hits are spent.
func TestModelSteps(t *testing.T) {
	s := spec{limit: limit, windowMs: winMs}
	hit := func(start, remaining int64) Op {
		return Op{Kind: KindHit, Outcome: OutcomeOK, Allowed: true, Remaining: remaining, ResetAt: start + winMs}
	}
	refused := Op{Kind: KindHit, Outcome: OutcomeOK, ResetAt: t0 + winMs}
	peek := func(start, used, now int64) Op {
		return Op{Kind: KindPeek, Outcome: OutcomeOK, WindowStart: start, Used: used, AppliedNow: now}
	}
	illegal := state{start: -1}
	tests := []struct {
		name string
		from state
		op   Op
		want state
	}{
		{"first hit opens a window", state{}, hit(t0, 2), state{t0, 1, 0}},
		{"first hit that is not fresh", state{}, hit(t0, 1), illegal},
		{"first hit after a lost one", state{lost: 1}, hit(t0, 1), state{t0, 2, 0}},
		{"unknown hit is only noted", state{t0, 1, 0}, Op{Kind: KindHit, Outcome: OutcomeUnknown}, state{t0, 1, 1}},
		{"next hit in the window", state{t0, 1, 0}, hit(t0, 1), state{t0, 2, 0}},
		{"lost hits make up a gap", state{t0, 1, 2}, hit(t0, 0), state{t0, 3, 1}},
		{"a gap with no lost hits", state{t0, 1, 0}, hit(t0, 0), illegal},
		{"a count going backwards", state{t0, 2, 4}, hit(t0, 2), illegal},
		{"remaining out of range", state{t0, 1, 4}, hit(t0, limit), illegal},
		{"refused when full", state{t0, limit, 0}, refused, state{t0, limit, 0}},
		{"refused when a lost hit filled it", state{t0, limit - 1, 1}, refused, state{t0, limit, 0}},
		{"refused when not full", state{t0, limit - 1, 0}, refused, illegal},
		{"fresh window one window later", state{t0, limit, 0}, hit(t0+winMs, 2), state{t0 + winMs, 1, 0}},
		{"window reopened early", state{t0, limit, 3}, hit(t0+winMs-1, 2), illegal},
		{"window reopened early by lost hits", state{t0, limit, 3}, hit(t0+winMs-1, 1), illegal},
		{"window moved backwards", state{t0, 1, 3}, hit(t0-winMs, 2), illegal},
		{"lost hits opened the next window", state{t0, 1, 2}, hit(t0+1700, 0), state{t0 + 1700, 3, 0}},
		{"peek of the window", state{t0, 2, 0}, peek(t0, 2, t0+5), state{t0, 2, 0}},
		{"peek of more than the limit", state{t0, 2, 5}, peek(t0, limit+1, t0+5), illegal},
		{"peek missing a hit", state{t0, 2, 0}, peek(t0, 1, t0+5), illegal},
		{"peek of a window lost hits opened", state{t0, 2, 1}, peek(t0+1500, 1, t0+1600), state{t0 + 1500, 1, 0}},
		{"peek of a window nothing opened", state{t0, 2, 0}, peek(t0+1500, 1, t0+1600), illegal},
		{"peek of no window, never seen", state{lost: 1}, peek(0, 0, t0), state{lost: 1}},
		{"peek of no window, lapsed", state{t0, 2, 0}, peek(0, 0, t0+winMs), state{t0, 2, 0}},
		{"peek of no window, still open", state{t0, 2, 5}, peek(0, 0, t0+winMs-1), illegal},
	}
	for _, tt := range tests {
		got, ok := s.step(tt.from, tt.op)
		if (tt.want == illegal && ok) || (tt.want != illegal && (!ok || got != tt.want)) {
			t.Errorf("%s: got %+v ok=%v, want %+v", tt.name, got, ok, tt.want)
		}
	}
}

// simulate records a history of a correct limiter: each op takes effect at a
// random instant inside its interval, in that order, with decide() run on a
// clock that follows those instants (nsPerMs ns of run time per ms of
// clock). Some ops lose their answer; half of those still take effect,
// possibly long after the client gave up.
func simulate(seed uint64, workers, opsPerWorker int, lostRate float64, nsPerMs int64) history {
	rng := rand.New(rand.NewPCG(seed, 1))
	type event struct {
		at    int64 // when the op takes effect, ns since start
		index int   // into ops
	}
	var ops history
	var events []event
	for w := range workers {
		t := int64(rng.IntN(1000))
		for range opsPerWorker {
			op := Op{Client: w, Key: "sim", Node: "n1", Kind: KindHit, Outcome: OutcomeOK, Invoke: t}
			if rng.IntN(4) == 0 {
				op.Kind = KindPeek
			}
			op.Return = t + 1000 + rng.Int64N(50_000)
			at := op.Invoke + rng.Int64N(op.Return-op.Invoke+1)
			if rng.Float64() < lostRate {
				op.Outcome = OutcomeUnknown
				at += rng.Int64N(100_000) // may land after the client gave up
				if rng.IntN(2) == 0 {
					at = -1 // never applied
				}
			}
			op.ID = len(ops) + 1
			if at >= 0 {
				events = append(events, event{at, len(ops)})
			}
			ops = append(ops, op)
			t = op.Return + int64(rng.IntN(2000))
		}
	}
	slices.SortFunc(events, func(a, b event) int { return cmp.Compare(a.at, b.at) })

	var start, count int64
	for _, e := range events {
		op := &ops[e.index]
		now := t0 + e.at/nsPerMs
		lapsed := start != 0 && now-start >= winMs
		if op.Kind == KindPeek {
			op.AppliedNow = now
			// a lapsed window may or may not have been expired yet
			if !lapsed || rng.IntN(2) == 0 {
				op.WindowStart, op.Used = start, count
			}
			continue
		}
		if start == 0 || lapsed {
			start, count = now, 0
		}
		op.Allowed = count < limit
		if op.Allowed {
			count++
		}
		op.Remaining, op.ResetAt = limit-count, start+winMs
	}
	return ops
}

// Long histories from a correct limiter must pass, and a single bad answer
// buried in one must be caught.
func TestSimulatedRuns(t *testing.T) {
	for seed := range uint64(5) {
		h := simulate(seed, 8, 150, 0.03, 1000)
		res := Check(cfg, h)
		if !res.Valid {
			t.Fatalf("seed %d: correct run judged invalid: %+v", seed, res.Violations)
		}
		if res.Counts.Refused == 0 || res.Counts.Unknown == 0 {
			t.Fatalf("seed %d: simulation too tame: %+v", seed, res.Counts)
		}

		// Admit one refused hit: a double spend.
		i := slices.IndexFunc(h, func(op Op) bool { return op.Kind == KindHit && op.Outcome == OutcomeOK && !op.Allowed })
		bad := slices.Clone(h)
		bad[i].Allowed = true
		res = Check(cfg, bad)
		if res.Valid || res.Keys[0].Linearizable != LinIllegal {
			t.Fatalf("seed %d: double spend of op %d not caught: %+v", seed, bad[i].ID, res)
		}
	}
}
