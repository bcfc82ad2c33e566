package cluster

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/policy"
)

// Paths of the policy API, served by the HTTP layer and used here to
// forward writes to the leader.
const (
	PoliciesPath = "/v1/policies"
	WindowsPath  = "/v1/windows"
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
func (n *Node) SetPolicy(ctx context.Context, p policy.Policy, forwarded bool) (string, error) {
	if err := p.Validate(); err != nil {
		return "", err
	}
	if !n.IsLeader() {
		var out struct {
			Result string `json:"result"`
		}
		err := n.fwd.adminMethod(ctx, forwarded, http.MethodPut, PoliciesPath+"/"+url.PathEscape(p.Name), p, &out)
		return out.Result, err
	}
	// The cap is the leader's, checked before the log: the state machine
	// applies every policy entry as older versions did, so replicas of
	// mixed versions stay identical.
	n.policyMu.Lock()
	defer n.policyMu.Unlock()
	if _, exists := n.fsm.Policy(p.Name); !exists && n.fsm.Stats().Policies >= policy.MaxPolicies {
		return "", fmt.Errorf("add policy %s: %w", p.Name, policy.ErrTooManyPolicies)
	}
	res, err := n.applyAdmin(fsm.EncodeSetPolicies(fsm.SetUpsert, []policy.Policy{p}))
	if err != nil {
		return "", fmt.Errorf("set policy %s: %w", p.Name, err)
	}
	return res.(*fsm.SetResult).Changes[0], nil
}

// DeletePolicy deletes a policy and its windows through the log; it fails
// with ErrUnknownPolicy when there is no such policy.
func (n *Node) DeletePolicy(ctx context.Context, name string, forwarded bool) error {
	if err := policy.ValidateName(name); err != nil {
		return fmt.Errorf("%w %q", ErrUnknownPolicy, name)
	}
	if !n.IsLeader() {
		return n.fwd.adminMethod(ctx, forwarded, http.MethodDelete, PoliciesPath+"/"+url.PathEscape(name), nil, nil)
	}
	res, err := n.applyAdmin(fsm.EncodeDeletePolicy(name))
	if err != nil {
		return fmt.Errorf("delete policy %s: %w", name, err)
	}
	if !res.(*fsm.DeleteResult).Found {
		return fmt.Errorf("%w %q", ErrUnknownPolicy, name)
	}
	return nil
}

// ResetKey forgets the state of (policy, client) through the log, so its
// next hit starts afresh. It reports whether the key had live state.
func (n *Node) ResetKey(ctx context.Context, policyName, client string, forwarded bool) (bool, error) {
	if err := (Hit{Policy: policyName, Client: client, Cost: 1}).Validate(); err != nil {
		return false, err
	}
	if _, ok := n.Policy(policyName); !ok {
		return false, fmt.Errorf("%w %q", ErrUnknownPolicy, policyName)
	}
	if !n.IsLeader() {
		var out struct {
			Reset bool `json:"reset"`
		}
		err := n.fwd.adminMethod(ctx, forwarded, http.MethodDelete,
			WindowsPath+"/"+url.PathEscape(policyName)+"/"+url.PathEscape(client), nil, &out)
		return out.Reset, err
	}
	res, err := n.applyAdmin(fsm.EncodeResetKey(policyName, client))
	if err != nil {
		return false, fmt.Errorf("reset %s/%s: %w", policyName, client, err)
	}
	return res.(*fsm.ResetResult).Found, nil
}

// applyAdmin writes one admin entry on the leader and returns what the
// state machine made of it.
func (n *Node) applyAdmin(data []byte) (any, error) {
	f := n.apply(data, n.cfg.ApplyTimeout)
	// Also seedPolicies' wait, on the node's own goroutine.
	if err := awaitFuture(f, n.stop); err != nil {
		return nil, classifyApply(err)
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
func (n *Node) ReadPolicies(ctx context.Context, stale, forwarded bool) ([]policy.Policy, error) {
	if !stale && !n.IsLeader() {
		if forwarded {
			return nil, ErrNotLeader
		}
		return n.fwd.readPolicies(ctx)
	}
	if !stale {
		if err := n.readBarrier(ctx); err != nil {
			return nil, err
		}
	}
	return n.fsm.Policies(), nil
}
