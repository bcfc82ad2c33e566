package cluster

import (
	"errors"
	"testing"

	"github.com/rlnode/rlnode/window"
)

func TestForwardWireRoundTrip(t *testing.T) {
	reqs := []hitReq{{Policy: "default", Client: "alice", Cost: 1}, {Policy: "default", Client: "bob ü", Cost: 3}}
	got, err := decodeForwardRequest(encodeForwardRequest(nil, reqs))
	if err != nil || len(got) != 2 || got[0] != reqs[0] || got[1] != reqs[1] {
		t.Fatalf("request round trip: %+v %v", got, err)
	}
	outs := []outcome{
		{res: CheckResult{Decision: window.Decision{Outcome: window.Allowed, WindowStart: 5, Count: 1, Remaining: 4, ResetAt: 65}, Now: 6, Limit: 5, WindowMs: 60}},
		{err: errors.Join(ErrNotCounted, ErrNotLeader)},
	}
	back, err := decodeForwardResponse(encodeForwardResponse(nil, "n1", outs), reqs)
	if err != nil {
		t.Fatal(err)
	}
	if d := back[0].res; d.ServedBy != "n1" || d.Decision != outs[0].res.Decision || d.Client != "alice" || d.Limit != 5 {
		t.Fatalf("decided hit came back as %+v", d)
	}
	if !errors.Is(back[1].err, ErrNotCounted) || errors.Is(back[1].err, ErrOutcomeUnknown) {
		t.Fatalf("not-counted hit came back as %v", back[1].err)
	}
	for _, bad := range []hitReq{{Policy: "default", Client: "", Cost: 1}, {Policy: "default", Client: "a\x00", Cost: 1}, {Policy: "default", Client: "a", Cost: 0}} {
		if _, err := decodeForwardRequest(encodeForwardRequest(nil, []hitReq{bad})); !errors.Is(err, ErrBadForward) {
			t.Errorf("accepted invalid forwarded hit %+v: %v", bad, err)
		}
	}
}

// FuzzForwardWire: whatever arrives on the internal endpoint, or comes back
// from a leader, decodes to an error or a valid value, never a panic.
func FuzzForwardWire(f *testing.F) {
	reqs := []hitReq{{Policy: "default", Client: "alice", Cost: 1}}
	f.Add(encodeForwardRequest(nil, reqs))
	f.Add(encodeForwardResponse(nil, "n1", []outcome{{err: ErrNotCounted}}))
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, err := decodeForwardRequest(b); err == nil {
			for _, r := range got {
				if validateReq(r) != nil {
					t.Fatalf("decoded an invalid hit %+v", r)
				}
			}
		}
		decodeForwardResponse(b, reqs)
	})
}
