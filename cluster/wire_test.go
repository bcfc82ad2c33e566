package cluster

import (
	"errors"
	"reflect"
	"testing"

	"github.com/rlnode/rlnode/window"
)

func TestForwardWireRoundTrip(t *testing.T) {
	reqs := []group{
		{{Policy: "default", Client: "alice", Cost: 1}},
		{{Policy: "user", Client: "bob ü", Cost: 3}, {Policy: "org", Client: "o7", Cost: 2}},
		{{Policy: "gone", Client: "carol", Cost: 1}},
	}
	got, err := decodeForwardRequest(encodeForwardRequest(nil, reqs))
	if err != nil || !reflect.DeepEqual(got, reqs) {
		t.Fatalf("request round trip: %+v %v", got, err)
	}
	part := window.Result{Outcome: window.Allowed, Limit: 5, WindowMs: 60, Remaining: 4, ResetAt: 65, WindowStart: 5}
	refused := window.Result{Outcome: window.Refused, Limit: 2, WindowMs: 1000, Remaining: 0, ResetAt: 900, RetryAfterMs: 894}
	outs := []outcome{
		{res: CheckResult{Allowed: true, Now: 6, ServedBy: "n1", Hits: []HitResult{{Policy: "default", Client: "alice", Cost: 1, Outcome: window.Allowed, Parts: []window.Result{part}}}}},
		{res: CheckResult{Allowed: false, Now: 6, ServedBy: "n1", Hits: []HitResult{
			{Policy: "user", Client: "bob ü", Cost: 3, Outcome: window.Allowed, Parts: []window.Result{part}},
			{Policy: "org", Client: "o7", Cost: 2, Outcome: window.Refused, Parts: []window.Result{part, refused}, Main: 1},
		}}},
		{res: CheckResult{Now: 6, ServedBy: "n1", Hits: []HitResult{{Policy: "gone", Client: "carol", Cost: 1, UnknownPolicy: true}}}},
	}
	back, err := decodeForwardResponse(encodeForwardResponse(nil, "n1", outs), reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range outs {
		if !reflect.DeepEqual(back[i].res, outs[i].res) {
			t.Fatalf("group %d came back as %+v, want %+v", i, back[i].res, outs[i].res)
		}
	}
	back, err = decodeForwardResponse(encodeForwardResponse(nil, "n1", []outcome{{err: errors.Join(ErrNotCounted, ErrNotLeader)}}), reqs[:1])
	if err != nil || !errors.Is(back[0].err, ErrNotCounted) || errors.Is(back[0].err, ErrOutcomeUnknown) {
		t.Fatalf("not-counted group came back as %v (%v)", back[0].err, err)
	}
	for _, bad := range []hitReq{{Policy: "default", Client: "", Cost: 1}, {Policy: "default", Client: "a\x00", Cost: 1}, {Policy: "default", Client: "a", Cost: 0}} {
		if _, err := decodeForwardRequest(encodeForwardRequest(nil, []group{{bad}})); !errors.Is(err, ErrBadForward) {
			t.Errorf("accepted invalid forwarded hit %+v: %v", bad, err)
		}
	}
}

// FuzzForwardWire: whatever arrives on the internal endpoint, or comes back
// from a leader, decodes to an error or a valid value, never a panic.
func FuzzForwardWire(f *testing.F) {
	reqs := []group{{{Policy: "default", Client: "alice", Cost: 1}}}
	f.Add(encodeForwardRequest(nil, reqs))
	f.Add(encodeForwardResponse(nil, "n1", []outcome{{err: ErrNotCounted}}))
	f.Add([]byte{2, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, err := decodeForwardRequest(b); err == nil {
			for _, g := range got {
				for _, r := range g {
					if r.Validate() != nil {
						t.Fatalf("decoded an invalid hit %+v", r)
					}
				}
			}
		}
		decodeForwardResponse(b, reqs)
	})
}
