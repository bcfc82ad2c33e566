package cluster

import (
	"context"
	"errors"
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
	// The node asked checks the gate too: a leader of an older release
	// has no gate and might misread what it does not know.
	if err := n.RequireFormat(fsm.PolicyFormat(p)); err != nil {
		return "", fmt.Errorf("set policy %s: %w", p.Name, err)
	}
	res, err := opSetPolicy.do(ctx, n, p)
	return res.Result, err
}

func (n *Node) setPolicy(_ context.Context, p policy.Policy) (setPolicyResult, error) {
	// The cap is the leader's, checked before the log: the state machine
	// applies every policy entry as older versions did, so replicas of
	// mixed versions stay identical.
	if err := n.RequireFormat(fsm.PolicyFormat(p)); err != nil {
		return setPolicyResult{}, fmt.Errorf("set policy %s: %w", p.Name, err)
	}
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

// TableChange is what replacing the whole table did, by policy name.
type TableChange struct {
	Added     []string `json:"added"`
	Changed   []string `json:"changed"`
	Unchanged []string `json:"unchanged"`
	Removed   []string `json:"removed"`
}

// ReplacePolicies makes the table exactly ps in one log entry: listed
// policies are added or changed (open windows kept), every other policy is
// deleted with its windows. On a follower it goes to the leader.
func (n *Node) ReplacePolicies(ctx context.Context, ps []policy.Policy) (TableChange, error) {
	if err := n.RequireFormat(fsm.PoliciesFormat(ps)); err != nil { // as SetPolicy
		return TableChange{}, fmt.Errorf("replace the policy table: %w", err)
	}
	return opReplacePolicies.do(ctx, n, policiesResult{Policies: ps})
}

// checkTable refuses a table no replace may write: invalid or repeated
// policies, none at all, or more than the cap.
func checkTable(ps []policy.Policy) error {
	if len(ps) == 0 {
		return errors.New("replace the policy table: no policies (that would delete every one)")
	}
	if len(ps) > policy.MaxPolicies {
		return fmt.Errorf("replace the policy table: %d policies: %w", len(ps), policy.ErrTooManyPolicies)
	}
	seen := map[string]bool{}
	for _, p := range ps {
		if err := p.Validate(); err != nil {
			return err
		}
		if seen[p.Name] {
			return fmt.Errorf("policy %q given twice", p.Name)
		}
		seen[p.Name] = true
	}
	return nil
}

func (n *Node) replacePolicies(_ context.Context, r policiesResult) (TableChange, error) {
	if err := n.RequireFormat(fsm.PoliciesFormat(r.Policies)); err != nil {
		return TableChange{}, fmt.Errorf("replace the policy table: %w", err)
	}
	n.policyMu.Lock()
	defer n.policyMu.Unlock()
	res, err := n.applyAdmin(fsm.EncodeSetPolicies(fsm.SetReplace, r.Policies))
	if err != nil {
		return TableChange{}, fmt.Errorf("replace the policy table: %w", err)
	}
	sr := res.(*fsm.SetResult)
	out := TableChange{Added: []string{}, Changed: []string{}, Unchanged: []string{}, Removed: append([]string{}, sr.Removed...)}
	for i, p := range r.Policies {
		switch sr.Changes[i] {
		case "added":
			out.Added = append(out.Added, p.Name)
		case "changed":
			out.Changed = append(out.Changed, p.Name)
		default:
			out.Unchanged = append(out.Unchanged, p.Name)
		}
	}
	return out, nil
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
