package cluster

import (
	"context"
	"fmt"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/policy"
)

// Policy returns a policy of the replicated table as this node has applied
// it.
func (n *Node) Policy(name string) (policy.Policy, bool) { return n.fsm.Policy(name) }

// PolicyVersion moves on whenever this node's policy table may have
// changed.
func (n *Node) PolicyVersion() uint64 { return n.fsm.PolicyVersion() }

// Policies returns the replicated table, sorted by name.
func (n *Node) Policies() []policy.Policy { return n.fsm.Policies() }

// SetPolicy adds or replaces a policy through the log and says whether it
// was "added", "changed" or "unchanged". On a follower it goes to the leader.
func (n *Node) SetPolicy(ctx context.Context, p policy.Policy) (string, error) {
	if err := p.Validate(); err != nil {
		return "", err
	}
	res, err := opSetPolicy.do(ctx, n, p)
	return res.Result, err
}

func (n *Node) setPolicy(_ context.Context, p policy.Policy) (setPolicyResult, error) {
	// The cap is the leader's, checked before the log: the state machine
	// applies every policy entry as older versions did, so replicas of
	// mixed versions stay identical.
	n.policyMu.Lock()
	defer n.policyMu.Unlock()
	if _, exists := n.fsm.Policy(p.Name); !exists && n.fsm.Stats().Policies >= policy.MaxPolicies {
		return setPolicyResult{}, fmt.Errorf("add policy %s: %w", p.Name, policy.ErrTooManyPolicies)
	}
	res, err := n.applyAdmin(fsm.EncodeSetPolicies(fsm.SetUpsert, []policy.Policy{p}))
	if err != nil {
		return setPolicyResult{}, fmt.Errorf("set policy %s: %w", p.Name, err)
	}
	return setPolicyResult{res.(*fsm.SetResult).Changes[0]}, nil
}

// DeletePolicy deletes a policy and its windows through the log; it fails
// with ErrUnknownPolicy when there is no such policy. On a follower it goes
// to the leader.
func (n *Node) DeletePolicy(ctx context.Context, name string) error {
	_, err := opDeletePolicy.do(ctx, n, policyName{name})
	return err
}

func (n *Node) deletePolicy(_ context.Context, r policyName) (none, error) {
	res, err := n.applyAdmin(fsm.EncodeDeletePolicy(r.Name))
	if err != nil {
		return none{}, fmt.Errorf("delete policy %s: %w", r.Name, err)
	}
	if !res.(*fsm.DeleteResult).Found {
		return none{}, fmt.Errorf("%w %q", ErrUnknownPolicy, r.Name)
	}
	return none{}, nil
}

// ResetKey forgets the state of (policy, client) through the log, so its
// next hit starts afresh. It reports whether the key had live state. On a
// follower it goes to the leader.
func (n *Node) ResetKey(ctx context.Context, policyName, client string) (bool, error) {
	res, err := opResetKey.do(ctx, n, keyRequest{policyName, client})
	return res.Reset, err
}

func (n *Node) resetKey(_ context.Context, r keyRequest) (resetResult, error) {
	// The leader's table decides: a follower may not have applied a
	// policy its caller just added.
	if _, ok := n.Policy(r.Policy); !ok {
		return resetResult{}, fmt.Errorf("%w %q", ErrUnknownPolicy, r.Policy)
	}
	res, err := n.applyAdmin(fsm.EncodeResetKey(r.Policy, r.Client))
	if err != nil {
		return resetResult{}, fmt.Errorf("reset %s/%s: %w", r.Policy, r.Client, err)
	}
	return resetResult{res.(*fsm.ResetResult).Found}, nil
}

// applyAdmin writes one admin entry on the leader and returns what the
// state machine made of it.
func (n *Node) applyAdmin(data []byte) (any, error) {
	f := n.apply(data, n.cfg.ApplyTimeout)
	// Also seedPolicies' wait, on the node's own goroutine.
	if err := awaitFuture(f, n.stop); err != nil {
		return nil, translate(err)
	}
	if err, ok := f.Response().(error); ok {
		return nil, err
	}
	return f.Response(), nil
}

// seedPolicies writes Config.Seed when this node leads a cluster whose
// table was never set: a new cluster, or one upgraded from the release
// before policies. The state machine ignores a seed once anything set the
// table, so a race between two leaders is harmless.
func (n *Node) seedPolicies() {
	if n.fsm.Seeded() {
		return
	}
	if _, err := n.applyAdmin(fsm.EncodeSetPolicies(fsm.SetSeed, n.cfg.Seed)); err != nil {
		n.log.Warn("seed the policy table", "error", err)
		return
	}
	n.log.Info("seeded the policy table", "policies", len(n.cfg.Seed))
}

// ReadPolicies returns the replicated table. Unless stale is set the read is
// linearizable like Peek (a follower asks the leader), so a client that just
// changed a policy reads its own write wherever it asks.
func (n *Node) ReadPolicies(ctx context.Context, stale bool) ([]policy.Policy, error) {
	if stale {
		return n.fsm.Policies(), nil
	}
	res, err := opReadPolicies.do(ctx, n, none{})
	return res.Policies, err
}

func (n *Node) readPolicies(ctx context.Context, _ none) (policiesResult, error) {
	if err := n.readBarrier(ctx); err != nil {
		return policiesResult{}, err
	}
	return policiesResult{n.fsm.Policies()}, nil
}
