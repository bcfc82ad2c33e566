package cluster

import (
	"errors"
	"fmt"
	"testing"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/window"
)

func hopItem(key string, hits int64) CallItem {
	return CallItem{Name: "api", Key: key, Call: window.Call{Alg: window.CallTokenBucket, Hits: hits, Limit: 10, Duration: 60_000}}
}

// The hop carries requests and answers whole, each answer its own kind.
func TestCallsHopRoundTrip(t *testing.T) {
	grant := hopItem("g", 0)
	grant.Lease = fsm.CallLease{Grant: true, Holder: "n2", Want: 4, LeaseMs: 2500}
	reqs := []CallsRequest{{Owner: "alice", Items: []CallItem{hopItem("a", 1), hopItem("b", 2)}}, {Items: []CallItem{grant}}, {Owner: "bob", Items: []CallItem{hopItem("c", 1)}}, {Items: []CallItem{hopItem("d", 1)}}, {Items: []CallItem{hopItem("e", 1)}}}
	got, err := decodeCallsHop(encodeCallsHop(reqs))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(reqs) {
		t.Fatalf("decoded %+v, want %+v", got, reqs)
	}
	res := []callsResult{
		{ans: CallsAnswer{Now: 5, Items: []CallOutcome{{CallResult: window.CallResult{Limit: 10, Remaining: 9, Reset: 7}}, {CallResult: window.CallResult{Over: true, Limit: 10}, Err: "x"}}}},
		{ans: CallsAnswer{Now: 6, Items: []CallOutcome{{Leasable: true, Units: 4, GrantIndex: 9, Expiry: 2506}}}},
		{err: notCounted(ErrClusterUpgrading, errors.New("voter n3"))},
		{err: notCounted(ErrNotLeader, nil)},
		{err: outcomeUnknown(errors.New("timeout"))},
	}
	out, err := decodeCallsHopAnswer(encodeCallsHopAnswer("n1", res), reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		want := res[i].ans
		want.ServedBy = "n1"
		if fmt.Sprint(out[i].ans) != fmt.Sprint(want) || out[i].err != nil {
			t.Fatalf("answer %d: %+v, want %+v", i, out[i], want)
		}
	}
	for i, want := range []error{ErrClusterUpgrading, ErrNotCounted, ErrOutcomeUnknown} {
		if !errors.Is(out[2+i].err, want) {
			t.Fatalf("answer %d: %v, want %v", 2+i, out[2+i].err, want)
		}
	}
	if !isFinal(out[2].err) || isFinal(out[3].err) {
		t.Fatalf("upgrading must be final, not-leader not: %v, %v", out[2].err, out[3].err)
	}
}

// Bad bytes never panic and never decode: every truncation and a few
// edits of a good hop.
func TestCallsHopRefusesBadBytes(t *testing.T) {
	good := encodeCallsHop([]CallsRequest{{Owner: "o", Items: []CallItem{hopItem("a", 1)}}})
	for i := range len(good) {
		if _, err := decodeCallsHop(good[:i]); err == nil {
			t.Fatalf("decoded a hop cut at %d", i)
		}
	}
	for i := range len(good) {
		b := append([]byte(nil), good...)
		b[i] ^= 0xff
		decodeCallsHop(b) // must not panic; some edits stay valid
	}
	if _, err := decodeCallsHop(append(good, 0)); err == nil {
		t.Fatal("decoded trailing bytes")
	}
	if _, err := decodeCallsHopAnswer([]byte{callsWireVersion, 0, 1, 9}, []CallsRequest{{}}); err == nil {
		t.Fatal("decoded an unknown status")
	}
}
