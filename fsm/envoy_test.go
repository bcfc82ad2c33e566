package fsm

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/rlnode/rlnode/policy"
)

// A policy's Envoy match travels in set-policies entries and snapshots; a
// policy without one encodes exactly as before the match existed.
func TestPolicyEnvoyMatchRoundTrip(t *testing.T) {
	plain := policy.Fixed("plain", 5, time.Minute)
	matched := policy.Fixed("envoy:edge.tenant.plan", 1, 24*time.Hour)
	matched.Envoy = &policy.Envoy{Domain: "edge", Descriptors: []policy.EnvoyEntry{{Key: "tenant", Value: "t-*", ShareThreshold: true, Order: 3}, {Key: "plan", Value: "free", ValueToMetric: true, Order: 4}},
		Unit: "DAY", RequestsPerUnit: 1, Name: "n", Replaces: []string{"m"}, ShadowMode: true, QuotaMode: true,
		Metadata: map[string]any{"team": "a", "tiers": []any{1, 2}}}
	matched.Align = policy.AlignEpoch

	if b := appendPolicyBody(nil, plain); b[len("plain")+1] != byte(plain.Alg()) {
		t.Fatalf("a plain policy's algorithm byte is %#x", b[len("plain")+1])
	}
	_, ps, err := decodeSetPolicies(EncodeSetPolicies(SetUpsert, []policy.Policy{plain, matched}))
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || !ps[0].Equal(plain) || !ps[1].Equal(matched) || ps[0].Envoy != nil {
		t.Fatalf("decoded %+v", ps)
	}

	tf := newTestFSM(t)
	tf.apply(1, EncodeSetPolicies(SetUpsert, []policy.Policy{plain, matched}))
	sink := persistSnapshot(t, tf.f)
	other := newTestFSM(t)
	v := other.f.PolicyVersion()
	if err := other.f.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if got, ok := other.f.Policy(matched.Name); !ok || !got.Equal(matched) {
		t.Fatalf("after restore: %+v", got)
	}
	if other.f.PolicyVersion() == v {
		t.Fatal("restore did not move the policy table version")
	}
	if a, b := digestOf(tf.f), digestOf(other.f); a != b {
		t.Fatalf("digest %x after restore, want %x", b, a)
	}
	// A changed match is a changed policy.
	changed := matched
	changed.Envoy = &policy.Envoy{Domain: "edge", Descriptors: matched.Envoy.Descriptors, Unit: "DAY", RequestsPerUnit: 1}
	res := tf.apply(1, EncodeSetPolicies(SetUpsert, []policy.Policy{changed})).(*SetResult)
	if res.Changes[0] != "changed" {
		t.Fatalf("dropping shadow_mode: %v", res.Changes)
	}
}
