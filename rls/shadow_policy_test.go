package rls

import (
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/metrics"
	"github.com/rlnode/rlnode/policy"
)

// TestPolicyShadowModeOnRLS: a policy set to mode shadow answers Envoy as
// shadow_mode does: OK for a descriptor over its limit, counted as
// shadow_over_limit and in the descriptor's shadow_mode stat, and it never
// refuses the request's other descriptors.
func TestPolicyShadowModeOnRLS(t *testing.T) {
	_, ps, err := policy.LoadEnvoy([]policy.EnvoyFile{{Name: "c.yaml", Data: []byte(modesConfig)}}, policy.EnvoyOptions{Anchored: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range ps {
		if ps[i].Envoy != nil && len(ps[i].Envoy.Descriptors) == 1 && ps[i].Envoy.Descriptors[0].Key == "a" {
			ps[i].Mode = policy.Shadow
		}
	}
	c := clustertest.Start(t, 1, clustertest.Options{Limit: 10, Window: time.Minute, Policies: ps})
	rec := &results{counts: map[string]int{}, limits: map[string]metrics.RLSLimitStats{}}
	s := New(Config{Limiter: c.Leader(10 * time.Second).Node, Observer: rec})
	for i, want := range []string{"OK OK", "OK OK", "OK OK"} {
		if got := verdict(t, s, entries("a", "1")); got != want {
			t.Fatalf("hit %d: %s, want %s", i, got, want)
		}
	}
	if rec.counts["s/shadow_over_limit"] != 2 || rec.counts["s/ok"] != 1 {
		t.Fatalf("descriptor results %v, want 1 ok and 2 shadow_over_limit", rec.counts)
	}
	if st := rec.limits["s/a"]; st.TotalHits != 3 || st.WithinLimit != 1 || st.OverLimit != 2 || st.ShadowMode != 2 {
		t.Fatalf("a's counters %+v", st)
	}
	// With an enforcing descriptor that has room: the request passes.
	if got := verdict(t, s, entries("a", "1"), entries("q2", "z")); got != "OK OK OK" {
		t.Fatalf("with q2: %s", got)
	}
}
