package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

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

// policyWriter writes the policy table on the leader: the leader side of
// SetPolicy, ReplacePolicies, DeletePolicy, ResetKey and ReadPolicies
// (the leader operations route there), and the seed of a new table. It
// reaches the node through policyNode and reads the table through
// policyState, so its checks before the log are tested without a cluster
// (policies_internal_test.go).
type policyWriter struct {
	node  policyNode
	state policyState
	seed  []policy.Policy
	log   hclog.Logger
	// mu is held by every policy write while it applies (and by a
	// restore): a check (table size, table version) and its write are one
	// step.
	mu sync.Mutex
}

// policyState is the replicated table as the leader reads it.
type policyState interface {
	Policy(name string) (policy.Policy, bool)
	PolicyTable() ([]policy.Policy, string)
	Stats() fsm.Stats
	Seeded() bool
}

// policyNode is the leader as its policy writes need it.
type policyNode interface {
	// applyAdmin writes one entry and returns what the state machine made
	// of it.
	applyAdmin(data []byte) (any, error)
	// RequireFormat refuses a write every voter cannot apply yet.
	RequireFormat(need fsm.Format) error
	// readBarrier returns once this leader applied everything committed
	// before the call.
	readBarrier(ctx context.Context) error
	// waitLeaderReady waits until this node, as leader, has applied
	// everything committed before its term.
	waitLeaderReady(ctx context.Context) error
}

// onPolicies runs a leader operation on the node's policy writer.
func onPolicies[Req, Resp any](f func(*policyWriter, context.Context, Req) (Resp, error)) func(*Node, context.Context, Req) (Resp, error) {
	return func(n *Node, ctx context.Context, r Req) (Resp, error) { return f(n.policyWriter, ctx, r) }
}

func (w *policyWriter) setPolicy(_ context.Context, p policy.Policy) (setPolicyResult, error) {
	// The cap is the leader's, checked before the log: the state machine
	// applies every policy entry as older versions did, so replicas of
	// mixed versions stay identical.
	if err := w.node.RequireFormat(fsm.PolicyFormat(p)); err != nil {
		return setPolicyResult{}, fmt.Errorf("set policy %s: %w", p.Name, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, exists := w.state.Policy(p.Name); !exists && w.state.Stats().Policies >= policy.MaxPolicies {
		return setPolicyResult{}, fmt.Errorf("add policy %s: %w", p.Name, policy.ErrTooManyPolicies)
	}
	res, err := w.node.applyAdmin(fsm.EncodeSetPolicies(fsm.SetUpsert, []policy.Policy{p}))
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

func (w *policyWriter) replacePolicies(ctx context.Context, r replaceRequest) (TableChange, error) {
	if err := w.node.RequireFormat(fsm.PoliciesFormat(r.Policies)); err != nil {
		return TableChange{}, fmt.Errorf("replace the policy table: %w", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.checkTableVersion(ctx, r.IfMatch); err != nil {
		return TableChange{}, fmt.Errorf("replace the policy table: %w", err)
	}
	res, err := w.node.applyAdmin(fsm.EncodeSetPolicies(fsm.SetReplace, r.Policies))
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
	_, out.Version = w.state.PolicyTable()
	return out, nil
}

// checkTableVersion refuses a whole-table write computed from a table that
// is no longer this leader's (ErrTableChanged). Called with mu held:
// every policy write on the leader holds it while its entry applies, so
// nothing changes the table between this check and the write's own entry
// (DESIGN.md, "No lost update"). It first waits until this leader has
// applied what earlier leaders committed, or it would compare with a
// table older than the log's.
func (w *policyWriter) checkTableVersion(ctx context.Context, ifMatch string) error {
	if ifMatch == AnyVersion {
		return nil
	}
	if err := w.node.waitLeaderReady(ctx); err != nil {
		return err
	}
	if _, have := w.state.PolicyTable(); have != ifMatch {
		return fmt.Errorf("%w: it was computed from version %s, the table is now version %s; read it again (GET /v1/policies) and redo the change", ErrTableChanged, ifMatch, have)
	}
	return nil
}

// nodePolicies is the node as its policy writer uses it.
type nodePolicies struct{ n *Node }

func (a nodePolicies) applyAdmin(data []byte) (any, error)   { return a.n.applyAdmin(data) }
func (a nodePolicies) RequireFormat(need fsm.Format) error   { return a.n.RequireFormat(need) }
func (a nodePolicies) readBarrier(ctx context.Context) error { return a.n.readBarrier(ctx) }

// waitLeaderReady waits until this node, as leader, has applied everything
// committed before its term (the barrier of watchLeadership).
func (a nodePolicies) waitLeaderReady(ctx context.Context) error {
	n := a.n
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

func (w *policyWriter) deletePolicy(_ context.Context, r policyName) (none, error) {
	// Every policy write holds mu while it applies, so a whole-table
	// write's version check and its entry are one step.
	w.mu.Lock()
	defer w.mu.Unlock()
	res, err := w.node.applyAdmin(fsm.EncodeDeletePolicy(r.Name))
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

func (w *policyWriter) resetKey(_ context.Context, r keyRequest) (resetResult, error) {
	// The leader's table decides: a follower may not have applied a
	// policy its caller just added.
	if _, ok := w.state.Policy(r.Policy); !ok {
		return resetResult{}, fmt.Errorf("%w %q", ErrUnknownPolicy, r.Policy)
	}
	res, err := w.node.applyAdmin(fsm.EncodeResetKey(r.Policy, r.Client))
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
func (w *policyWriter) seedPolicies() {
	w.mu.Lock() // a policy write like any other (checkTableVersion)
	defer w.mu.Unlock()
	if w.state.Seeded() {
		return
	}
	if _, err := w.node.applyAdmin(fsm.EncodeSetPolicies(fsm.SetSeed, w.seed)); err != nil {
		w.log.Warn("seed the policy table", "error", err)
		return
	}
	w.log.Info("seeded the policy table", "policies", len(w.seed))
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

func (w *policyWriter) readPolicies(ctx context.Context, _ none) (policiesResult, error) {
	if err := w.node.readBarrier(ctx); err != nil {
		return policiesResult{}, err
	}
	ps, v := w.state.PolicyTable()
	return policiesResult{Policies: ps, Version: v}, nil
}

// WriteCounter sets a key's used count or counts without a limit check,
// through the log with the leader's clock, and returns the key as it
// stands afterwards. On a follower it goes to the leader.
func (n *Node) WriteCounter(ctx context.Context, c Counter) (CheckResult, error) {
	return opWriteCounter.do(ctx, n, c)
}
