package fsm

import (
	"testing"
	"time"

	"github.com/rlnode/rlnode/policy"
)

// TestPolicyFormatOfRound3Policies: every policy format 3 (bd9eb85)
// decodes needs no more, so the gate never refuses what old nodes apply;
// this round's concurrency algorithm needs format 4.
func TestPolicyFormatOfRound3Policies(t *testing.T) {
	for _, alg := range []string{"fixed_window", "sliding_window", "token_bucket"} {
		for _, cons := range []string{"", policy.Leased} {
			for _, align := range []string{"", policy.AlignEpoch} {
				p := policy.Policy{Name: "p", Algorithm: alg, Consistency: cons, Align: align,
					Limits: []policy.Limit{{Limit: 5, Window: policy.Duration(time.Minute)}}}
				if f := PolicyFormat(p); f != FormatR3 {
					t.Errorf("%s %q %q: format %d; want 3", alg, cons, align, f)
				}
			}
		}
	}
	inflight := policy.Policy{Name: "inflight", Algorithm: "concurrency", Limits: []policy.Limit{{Limit: 4}}}
	if f := PolicyFormat(inflight); f != FormatR4 {
		t.Errorf("a concurrency policy: format %d; want 4 (round 3 cannot decode it)", f)
	}
	if PoliciesFormat(nil) != FormatR3 {
		t.Fatalf("no policies: format %d; want 3", PoliciesFormat(nil))
	}
}
