package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

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
	// The version gate is the operation's (leaderOp.format).
	res, err := opSetPolicy.do(ctx, n, p)
	return res.Result, gateContext("set policy "+p.Name, err)
}

// gateContext says what a write the version gate refused was.
func gateContext(what string, err error) error {
	var ue *UpgradingError
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return err
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

// TableChange is what replacing the whole table did, by policy name.
type TableChange struct {
	Added     []string `json:"added"`
	Changed   []string `json:"changed"`
	Unchanged []string `json:"unchanged"`
	Removed   []string `json:"removed"`
	// Version is the table's version after the write.
	Version string `json:"version"`
}

// AnyVersion is the version to match that a whole-table write names to
// replace whatever the table holds (HTTP's If-Match: *).
const AnyVersion = "*"

// PolicyTable is the replicated table, sorted by name, and its version
// (fsm.TableVersion): what a whole-table write names as the table it was
// computed from.
type PolicyTable struct {
	Policies []policy.Policy `json:"policies"`
	Version  string          `json:"version"`
}

// ReplacePolicies makes the table exactly ps in one log entry: listed
// policies are added or changed (open windows kept), every other policy is
// deleted with its windows. ifMatch is the version of the table ps was
// computed from (PolicyTable.Version), or AnyVersion; when the table's
// version is another, nothing is written and the error is
// ErrTableChanged. On a follower it goes to the leader.
func (n *Node) ReplacePolicies(ctx context.Context, ps []policy.Policy, ifMatch string) (TableChange, error) {
	tc, err := opReplaceTable.do(ctx, n, replaceRequest{Policies: ps, IfMatch: ifMatch})
	return tc, gateContext("replace the policy table", err)
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

func (n *Node) replacePolicies(ctx context.Context, r replaceRequest) (TableChange, error) {
	n.policyMu.Lock()
	defer n.policyMu.Unlock()
	if err := n.checkTableVersion(ctx, r.IfMatch); err != nil {
		return TableChange{}, fmt.Errorf("replace the policy table: %w", err)
	}
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
	_, out.Version = n.fsm.PolicyTable()
	return out, nil
}

// checkTableVersion refuses a whole-table write computed from a table that
// is no longer this leader's (ErrTableChanged). Called with policyMu held:
// every policy write on the leader holds it while its entry applies, so
// nothing changes the table between this check and the write's own entry
// (DESIGN.md, "No lost update"). It first waits until this leader has
// applied what earlier leaders committed, or it would compare with a
// table older than the log's.
func (n *Node) checkTableVersion(ctx context.Context, ifMatch string) error {
	if ifMatch == AnyVersion {
		return nil
	}
	if err := n.waitLeaderReady(ctx); err != nil {
		return err
	}
	if _, have := n.fsm.PolicyTable(); have != ifMatch {
		return fmt.Errorf("%w: it was computed from version %s, the table is now version %s; read it again (GET /v1/policies) and redo the change", ErrTableChanged, ifMatch, have)
	}
	return nil
}

// waitLeaderReady waits until this node, as leader, has applied everything
// committed before its term (the barrier of watchLeadership).
func (n *Node) waitLeaderReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()
	for {
		term := n.raft.CurrentTerm()
		if !n.IsLeader() {
			return ErrNotLeader
		}
		if n.readyTerm.Load() == term {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(ErrNotLeader, fmt.Errorf("leader not ready yet: %w", ctx.Err()))
		case <-n.stop:
			return ErrClosed
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// DeletePolicy deletes a policy and its windows through the log; it fails
// with ErrUnknownPolicy when there is no such policy. On a follower it goes
// to the leader.
func (n *Node) DeletePolicy(ctx context.Context, name string) error {
	_, err := opDeletePolicy.do(ctx, n, policyName{name})
	return err
}

func (n *Node) deletePolicy(_ context.Context, r policyName) (none, error) {
	// Every policy write holds policyMu while it applies, so a
	// whole-table write's version check and its entry are one step.
	n.policyMu.Lock()
	defer n.policyMu.Unlock()
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
	n.policyMu.Lock() // a policy write like any other (checkTableVersion)
	defer n.policyMu.Unlock()
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
// The table comes with its version, which a whole-table write names.
func (n *Node) ReadPolicies(ctx context.Context, stale bool) (PolicyTable, error) {
	if stale {
		ps, v := n.fsm.PolicyTable()
		return PolicyTable{Policies: ps, Version: v}, nil
	}
	res, err := opReadPolicies.do(ctx, n, none{})
	if err != nil {
		return PolicyTable{}, err
	}
	if res.Version == "" {
		// A leader of the previous release: the version is the
		// content's, so the table it sent names it as well.
		res.Version = fsm.TableVersion(res.Policies)
	}
	return PolicyTable{Policies: res.Policies, Version: res.Version}, nil
}

func (n *Node) readPolicies(ctx context.Context, _ none) (policiesResult, error) {
	if err := n.readBarrier(ctx); err != nil {
		return policiesResult{}, err
	}
	ps, v := n.fsm.PolicyTable()
	return policiesResult{Policies: ps, Version: v}, nil
}
