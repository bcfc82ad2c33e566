package fsm_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/policy"
)

// A table's version is its content's: the same whatever the order, moved
// by any change to any policy.
func TestTableVersionIsTheContents(t *testing.T) {
	a, b := policy.Fixed("a", 10, time.Minute), policy.Fixed("b", 5, time.Second)
	v := fsm.TableVersion([]policy.Policy{a, b})
	if len(v) != 32 || fsm.TableVersion([]policy.Policy{b, a}) != v {
		t.Fatalf("version %q, or it depends on the order", v)
	}
	leased := a
	leased.Consistency = policy.Leased
	envoy := a
	envoy.Envoy = &policy.Envoy{Domain: "d"}
	seen := map[string]string{v: "the table"}
	for what, ps := range map[string][]policy.Policy{
		"one policy fewer":   {a},
		"a limit changed":    {policy.Fixed("a", 11, time.Minute), b},
		"a window changed":   {policy.Fixed("a", 10, time.Hour), b},
		"an option changed":  {leased, b},
		"an envoy match":     {envoy, b},
		"a policy renamed":   {policy.Fixed("c", 10, time.Minute), b},
		"no policies at all": nil,
		"one policy more":    {a, b, policy.Fixed("c", 1, time.Second)},
	} {
		got := fsm.TableVersion(ps)
		if prev, dup := seen[got]; dup {
			t.Errorf("%s has the version of %s", what, prev)
		}
		seen[got] = what
	}
}

// BenchmarkTableVersion is the cost of a version for a full table (4096
// policies): paid by every GET /v1/policies and every whole-table write.
func BenchmarkTableVersion(b *testing.B) {
	ps := make([]policy.Policy, policy.MaxPolicies)
	for i := range ps {
		ps[i] = policy.Fixed(fmt.Sprintf("policy-%04d", i), int64(i+1), time.Minute)
	}
	b.ReportAllocs()
	for b.Loop() {
		fsm.TableVersion(ps)
	}
}
