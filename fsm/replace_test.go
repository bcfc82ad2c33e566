package fsm

import (
	"slices"
	"testing"
	"time"

	"github.com/rlnode/rlnode/policy"
	"github.com/rlnode/rlnode/window"
)

// A replace entry is the whole table in one change: listed policies are
// set (open windows kept), every other policy is deleted with its keys.
func TestReplaceTableInOneEntry(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(pol("a", "fixed_window", lim(2, time.Minute)), pol("b", "fixed_window", lim(2, time.Minute)), pol("default", "fixed_window", lim(2, time.Minute)))
	tf.check(t0, nil, h2("a", "u", 2), h2("b", "u", 2))
	r, ok := tf.apply(1, EncodeSetPolicies(SetReplace, []policy.Policy{pol("a", "fixed_window", lim(3, time.Minute)), pol("c", "fixed_window", lim(1, time.Second))})).(*SetResult)
	if !ok {
		t.Fatalf("replace did not return *SetResult (fatal %v)", tf.fatal)
	}
	if !slices.Equal(r.Changes, []string{"changed", "added"}) || !slices.Equal(r.Removed, []string{"b", "default"}) {
		t.Fatalf("replace result %+v; want changed a, added c, removed b and default", r)
	}
	names := []string{}
	for _, p := range tf.f.Policies() {
		names = append(names, p.Name)
	}
	if !slices.Equal(names, []string{"a", "c"}) {
		t.Fatalf("table after replace: %v, want [a c]", names)
	}
	// a kept its open window (2 used of a raised 3); b is gone.
	if h := tf.check(t0+1, nil, h2("a", "u", 1)).Hits[0]; h.Outcome != window.Allowed || h.Parts[0].Remaining != 0 {
		t.Fatalf("a after replace: %+v; want its window kept (remaining 0)", h)
	}
	if h := tf.check(t0+2, nil, h2("b", "u", 1)).Hits[0]; !h.UnknownPolicy {
		t.Fatalf("b after replace: %+v; want unknown", h)
	}
	// Re-created, b starts afresh.
	tf.set(pol("b", "fixed_window", lim(2, time.Minute)))
	if h := tf.check(t0+3, nil, h2("b", "u", 1)).Hits[0]; h.Outcome != window.Allowed || h.Parts[0].Remaining != 1 {
		t.Fatalf("re-created b: %+v; want a fresh window", h)
	}
}
