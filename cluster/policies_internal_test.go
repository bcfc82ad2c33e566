package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/policy"
)

// fsmTableLeader is a leader's log reduced to a real state machine:
// entries apply at once. gate, when set, refuses writes as the version
// gate does.
type fsmTableLeader struct {
	f       *fsm.FSM
	index   uint64
	entries int
	gate    error
}

func (l *fsmTableLeader) applyAdmin(data []byte) (any, error) {
	l.index++
	l.entries++
	res := l.f.Apply(&raft.Log{Index: l.index, Term: 1, Type: raft.LogCommand, Data: data})
	if err, ok := res.(error); ok {
		return nil, err
	}
	return res, nil
}
func (l *fsmTableLeader) RequireFormat(fsm.Format) error        { return l.gate }
func (l *fsmTableLeader) readBarrier(context.Context) error     { return nil }
func (l *fsmTableLeader) waitLeaderReady(context.Context) error { return nil }

func newTestPolicyWriter(seed ...policy.Policy) (*policyWriter, *fsmTableLeader) {
	l := &fsmTableLeader{f: fsm.New(fsm.Config{})}
	return &policyWriter{node: l, state: l.f, seed: seed, log: hclog.NewNullLogger()}, l
}

// The policy table's writes on the leader, without a cluster: every
// refusal is made before the log (no entry written), and what is written
// is what the state machine reports.
func TestPolicyWriterChecksBeforeTheLog(t *testing.T) {
	ctx := context.Background()
	seed := testPolicy(t, "default", 10)
	w, l := newTestPolicyWriter(seed)

	w.seedPolicies()
	w.seedPolicies()
	if l.entries != 1 {
		t.Fatalf("seeding twice wrote %d entries, want 1 (the second sees a seeded table)", l.entries)
	}
	if res, err := w.setPolicy(ctx, testPolicy(t, "api", 5)); err != nil || res.Result != "added" {
		t.Fatalf("set api: %+v %v", res, err)
	}
	if res, err := w.setPolicy(ctx, testPolicy(t, "api", 5)); err != nil || res.Result != "unchanged" {
		t.Fatalf("set api again: %+v %v", res, err)
	}

	before := l.entries
	_, version := l.f.PolicyTable()
	stale := "00000000000000000000000000000000"
	if _, err := w.replacePolicies(ctx, replaceRequest{Policies: []policy.Policy{seed}, IfMatch: stale}); !errors.Is(err, ErrTableChanged) {
		t.Fatalf("replace from a stale version: %v, want ErrTableChanged", err)
	}
	if _, err := w.resetKey(ctx, keyRequest{Policy: "nosuch", Client: "c"}); !errors.Is(err, ErrUnknownPolicy) {
		t.Fatalf("reset of an unknown policy: %v", err)
	}
	l.gate = &UpgradingError{Need: fsm.CurrentFormat}
	if _, err := w.setPolicy(ctx, testPolicy(t, "new", 1)); !errors.As(err, new(*UpgradingError)) {
		t.Fatalf("set while the gate is closed: %v, want the gate's refusal", err)
	}
	l.gate = nil
	if l.entries != before {
		t.Fatalf("refused writes wrote %d entries", l.entries-before)
	}
	if _, err := w.deletePolicy(ctx, policyName{"nosuch"}); !errors.Is(err, ErrUnknownPolicy) {
		t.Fatalf("delete of an unknown policy: %v", err)
	}

	tc, err := w.replacePolicies(ctx, replaceRequest{Policies: []policy.Policy{seed, testPolicy(t, "other", 3)}, IfMatch: version})
	if err != nil || len(tc.Added) != 1 || tc.Added[0] != "other" || len(tc.Removed) != 1 || tc.Removed[0] != "api" || len(tc.Unchanged) != 1 || tc.Version == version {
		t.Fatalf("replace from the current version: %+v %v", tc, err)
	}
	read, err := w.readPolicies(ctx, none{})
	if err != nil || len(read.Policies) != 2 || read.Version != tc.Version {
		t.Fatalf("read after the replace: %+v %v", read, err)
	}
}

// The table's cap is the leader's, checked before the log: a policy past
// MaxPolicies is refused, a change of an existing one is not.
func TestPolicyWriterCapsTheTable(t *testing.T) {
	w, l := newTestPolicyWriter()
	ps := make([]policy.Policy, policy.MaxPolicies)
	for i := range ps {
		ps[i] = testPolicy(t, fmt.Sprintf("p%04d", i), 5)
	}
	if _, err := l.applyAdmin(fsm.EncodeSetPolicies(fsm.SetUpsert, ps)); err != nil {
		t.Fatal(err)
	}
	before := l.entries
	if _, err := w.setPolicy(context.Background(), testPolicy(t, "one-more", 5)); !errors.Is(err, policy.ErrTooManyPolicies) || l.entries != before {
		t.Fatalf("a policy past the cap: %v (%d entries written)", err, l.entries-before)
	}
	if res, err := w.setPolicy(context.Background(), testPolicy(t, "p0000", 7)); err != nil || res.Result != "changed" {
		t.Fatalf("a change at the cap: %+v %v", res, err)
	}
}
