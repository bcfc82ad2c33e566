package fsm

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/rlnode/rlnode/window"
)

func (tf *testFSM) counter(now int64, c Counter) *CounterResult {
	tf.t.Helper()
	r, ok := tf.apply(1, EncodeCounter(now, c)).(*CounterResult)
	if !ok {
		tf.t.Fatalf("counter %+v did not return *CounterResult (fatal %v)", c, tf.fatal)
	}
	return r
}

// set makes the used count N in every limit (within them), inc counts past
// the limit; both go through the same state update as hits, and replicas
// agree through snapshots.
func TestCounterSetAndInc(t *testing.T) {
	for _, alg := range []string{"fixed_window", "sliding_window", "token_bucket"} {
		t.Run(alg, func(t *testing.T) {
			tf := newTestFSM(t)
			tf.set(pol("p", alg, lim(5, time.Minute), lim(10, time.Hour)))
			tf.check(t0, nil, h2("p", "u", 1))
			r := tf.counter(t0+1, Counter{Kind: CounterSet, Policy: "p", Client: "u", N: 4})
			if !r.Hit.Counted || r.Hit.Parts[0].Remaining != 1 || r.Hit.Parts[1].Remaining != 6 {
				t.Fatalf("set 4: %+v; want remaining 1 and 6", r.Hit)
			}
			if h := tf.check(t0+2, nil, h2("p", "u", 2)).Hits[0]; h.Outcome != window.Refused {
				t.Fatalf("2 hits after set 4 of 5: %+v, want refused", h)
			}
			// Above the smallest limit: refused as never allowed, nothing changes.
			if r := tf.counter(t0+3, Counter{Kind: CounterSet, Policy: "p", Client: "u", N: 6}); r.Hit.Counted || r.Hit.Outcome != window.CostExceedsLimit {
				t.Fatalf("set 6 of 5: %+v, want cost_exceeds_limit", r.Hit)
			}
			if h := tf.check(t0+4, nil, h2("p", "u", 1)).Hits[0]; h.Outcome != window.Allowed || h.Parts[0].Remaining != 0 {
				t.Fatalf("a hit after the refused set: %+v, want the 5th allowed", h)
			}
			// inc counts past the limit.
			if r := tf.counter(t0+5, Counter{Kind: CounterInc, Policy: "p", Client: "v", N: 7}); !r.Hit.Counted || r.Hit.Parts[0].Remaining != 0 || r.Hit.Parts[1].Remaining != 3 {
				t.Fatalf("inc 7: %+v; want counted, remaining 0 and 3", r.Hit)
			}
			if h := tf.check(t0+6, nil, h2("p", "v", 1)).Hits[0]; h.Outcome != window.Refused {
				t.Fatalf("a hit after inc 7 of 5: %+v, want refused", h)
			}
			// set 0 forgets the key.
			tf.counter(t0+7, Counter{Kind: CounterSet, Policy: "p", Client: "v", N: 0})
			if h := tf.check(t0+8, nil, h2("p", "v", 5)).Hits[0]; h.Outcome != window.Allowed {
				t.Fatalf("5 hits after set 0: %+v, want allowed", h)
			}
			if r := tf.counter(t0+9, Counter{Kind: CounterInc, Policy: "nope", Client: "v", N: 1}); !r.Hit.UnknownPolicy {
				t.Fatalf("inc of an unknown policy: %+v", r.Hit)
			}
			other := newTestFSM(t)
			if err := other.f.Restore(io.NopCloser(bytes.NewReader(persistSnapshot(t, tf.f).Bytes()))); err != nil {
				t.Fatal(err)
			}
			if digestOf(other.f) != digestOf(tf.f) {
				t.Fatal("a replica restored from a snapshot disagrees after counter writes")
			}
		})
	}
}

func TestCounterEntriesRoundTripAndRefuseCorrupt(t *testing.T) {
	c := Counter{Kind: CounterInc, Policy: "p", Client: "ü", N: 3}
	if err := CheckEntry(EncodeCounter(42, c)); err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string][]byte{
		"kind 3":    EncodeCounter(1, Counter{Kind: 3, Policy: "p", Client: "c", N: 1}),
		"inc 0":     EncodeCounter(1, Counter{Kind: CounterInc, Policy: "p", Client: "c", N: 0}),
		"no client": EncodeCounter(1, Counter{Kind: CounterSet, Policy: "p", N: 1}),
		"truncated": EncodeCounter(1, c)[:6],
	} {
		if err := CheckEntry(bad); err == nil {
			t.Fatalf("%s: CheckEntry accepted it", name)
		}
	}
}
