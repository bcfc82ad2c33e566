package cluster

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
)

// A failed hit is matched by its outcome, its reason and its cause, and its
// words say each once.
func TestHitErrorMatchesOutcomeReasonAndCause(t *testing.T) {
	cases := []struct {
		err      error
		is, isnt []error
		text     string
	}{
		{classifyApply(raft.ErrNotLeader), []error{ErrNotCounted, ErrNotLeader, raft.ErrNotLeader}, []error{ErrOutcomeUnknown, ErrNoLeader},
			"the hit was not counted: this node is not the leader: node is not the leader"},
		{classifyApply(raft.ErrEnqueueTimeout), []error{ErrNotCounted, raft.ErrEnqueueTimeout}, []error{ErrOutcomeUnknown, ErrNotLeader},
			"the hit was not counted: timed out enqueuing operation"},
		{classifyApply(raft.ErrLeadershipLost), []error{ErrOutcomeUnknown, raft.ErrLeadershipLost}, []error{ErrNotCounted, ErrNotLeader},
			"the hit may or may not have counted: leadership lost while committing log"},
		{notCounted(ErrNoLeader, nil), []error{ErrNotCounted, ErrNoLeader}, []error{ErrOutcomeUnknown},
			"the hit was not counted: no leader is known"},
		{fmt.Errorf("check: %w", notCounted(nil, ErrClosed)), []error{ErrNotCounted, ErrClosed}, []error{ErrNotLeader},
			"check: the hit was not counted: node is shut down"},
	}
	for _, c := range cases {
		for _, target := range c.is {
			if !errors.Is(c.err, target) {
				t.Errorf("%q does not match %q", c.err, target)
			}
		}
		for _, target := range c.isnt {
			if errors.Is(c.err, target) {
				t.Errorf("%q matches %q", c.err, target)
			}
		}
		if c.err.Error() != c.text {
			t.Errorf("text %q, want %q", c.err, c.text)
		}
		var he *HitError
		if !errors.As(c.err, &he) {
			t.Errorf("%q is not a *HitError", c.err)
		}
	}
}

// What the leader sends back for a failed forwarded hit leaves the outcome
// to the status byte and keeps the reason and the cause.
func TestForwardedFailureCarriesItsCause(t *testing.T) {
	reqs := []group{{{Policy: "default", Client: "a", Cost: 1}}, {{Policy: "default", Client: "b", Cost: 1}}}
	outs := []outcome{{err: notCounted(ErrNotLeader, ErrClockSkew)}, {err: outcomeUnknown(raft.ErrLeadershipLost)}}
	got, err := decodeForwardResponse(encodeForwardResponse(nil, "n1", outs), reqs)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(got[0].err, ErrNotCounted) || got[0].err.Error() != "the hit was not counted: leader: this node is not the leader: "+ErrClockSkew.Error() {
		t.Errorf("not counted came back as %q", got[0].err)
	}
	if !errors.Is(got[1].err, ErrOutcomeUnknown) || got[1].err.Error() != "the hit may or may not have counted: leader: leadership lost while committing log" {
		t.Errorf("unknown came back as %q", got[1].err)
	}
}

// configNotApplied matches hashicorp/raft's refusal to snapshot behind a
// configuration entry (v1.7.3 snapshot.go builds this text) and nothing
// else.
func TestConfigNotAppliedMatchesRaftsRefusal(t *testing.T) {
	refusal := fmt.Errorf("cannot take snapshot now, wait until the configuration entry at %v has been applied (have applied %v)", 12, 11)
	if !configNotApplied(refusal) {
		t.Errorf("raft's refusal %q not recognised", refusal)
	}
	for _, other := range []error{raft.ErrNothingNewToSnapshot, raft.ErrNotLeader, errors.New("failed to create snapshot: disk full")} {
		if configNotApplied(other) {
			t.Errorf("%q taken for a configuration wait", other)
		}
	}
}
