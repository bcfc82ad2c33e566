package fsm

import (
	"slices"
	"strings"

	"github.com/rlnode/rlnode/policy"
)

// SetResult is what Apply returns for a set-policies entry: per policy,
// "added", "changed" or "unchanged"; Skipped when a seed met a table that
// was already seeded. Removed names the policies a SetReplace deleted,
// sorted.
type SetResult struct {
	Skipped bool
	Changes []string
	Removed []string
}

// DeleteResult is what Apply returns for a delete-policy entry.
type DeleteResult struct{ Found bool }

// ResetResult is what Apply returns for a reset-key entry.
type ResetResult struct{ Found bool }

func (f *FSM) applySetPolicies(data []byte) (any, error) {
	mode, ps, err := decodeSetPolicies(data)
	if err != nil {
		return nil, err
	}
	if mode == SetSeed && f.seeded {
		return &SetResult{Skipped: true}, nil
	}
	f.seeded = true
	f.tableVersion.Add(1)
	res := &SetResult{Changes: make([]string, len(ps))}
	for i, p := range ps {
		old := f.policies[p.Name]
		switch {
		case old == nil:
			res.Changes[i] = "added"
			f.policies[p.Name] = newTablePolicy(p, f.nextEpoch)
		case old.p.Equal(p):
			res.Changes[i] = "unchanged"
		default:
			// Same incarnation: open windows keep their state, matched
			// per limit by window length on the key's next hit.
			res.Changes[i] = "changed"
			np := newTablePolicy(p, old.epoch)
			if !sameShape(old, np) {
				// Its keys start afresh (liveStates): so do its
				// reservations' refunds (reservation.go).
				f.forgetReservedOf(p.Name)
			}
			f.policies[p.Name] = np
		}
	}
	if mode == SetReplace {
		res.Removed = f.deleteUnlisted(ps)
	}
	return res, nil
}

// deleteUnlisted deletes every policy not in keep, as applyDeletePolicy
// does one, and returns their names sorted. It deletes in name order:
// nextEpoch depends on the order, and every replica must reach the same.
func (f *FSM) deleteUnlisted(keep []policy.Policy) []string {
	var removed []string
	for name := range f.policies {
		if !slices.ContainsFunc(keep, func(k policy.Policy) bool { return k.Name == name }) {
			removed = append(removed, name)
		}
	}
	slices.Sort(removed)
	for _, name := range removed {
		f.nextEpoch = max(f.nextEpoch, f.policies[name].epoch) + 1
		delete(f.policies, name)
	}
	if len(removed) > 0 {
		f.sweepLeft = f.slab.Len()
	}
	return removed
}

func newTablePolicy(p policy.Policy, epoch uint32) *tablePolicy {
	return &tablePolicy{p: p, alg: p.Decider(), limits: p.WindowLimits(), epoch: epoch}
}

// applyDeletePolicy removes a policy. Its keys die at once (their epoch is
// no longer any policy's) and are reclaimed by expiry.
func (f *FSM) applyDeletePolicy(data []byte) (any, error) {
	name, err := decodeDeletePolicy(data)
	if err != nil {
		return nil, err
	}
	f.seeded = true
	p := f.policies[name]
	if p == nil {
		return &DeleteResult{}, nil
	}
	delete(f.policies, name)
	f.tableVersion.Add(1)
	f.nextEpoch = max(f.nextEpoch, p.epoch) + 1
	f.sweepLeft = f.slab.Len()
	return &DeleteResult{Found: true}, nil
}

// applyResetKey forgets one key: it decides as never seen from now on.
func (f *FSM) applyResetKey(data []byte) (any, error) {
	pol, client, err := decodeResetKey(data)
	if err != nil {
		return nil, err
	}
	return &ResetResult{Found: f.forget(pol, client)}, nil
}

// Policy returns a policy of the replicated table. It reads the table's
// view (policyView) without the state machine's lock, which Apply holds
// for a whole entry: the hit path's front ends (CheckOne) look a policy up
// per hit and must not wait for the entry being applied, nor make the
// next apply wait for them.
func (f *FSM) Policy(name string) (policy.Policy, bool) {
	p, ok := f.policyView().m[name]
	return p, ok
}

// policyView is the policy table at one table version, read without a
// lock: built once per version (under the state machine's read lock, so
// it is the table exactly as that version left it) and swapped whole.
type policyView struct {
	version uint64
	m       map[string]policy.Policy
}

// policyView returns the view of the table as it is now, building it when
// the table moved on since the last one. A version read here equal to the
// view's means no entry changed the table since the view was built: every
// change moves the version under the write lock, and a view is built under
// the read lock.
func (f *FSM) policyView() *policyView {
	if v := f.view.Load(); v != nil && v.version == f.tableVersion.Load() {
		return v
	}
	f.viewMu.Lock() // one build per version, however many readers miss
	defer f.viewMu.Unlock()
	f.mu.RLock()
	defer f.mu.RUnlock()
	version := f.tableVersion.Load()
	if v := f.view.Load(); v != nil && v.version == version {
		return v
	}
	v := &policyView{version: version, m: make(map[string]policy.Policy, len(f.policies))}
	for name, p := range f.policies {
		v.m[name] = p.p
	}
	f.view.Store(v)
	return v
}

// Policies returns the replicated table sorted by name.
func (f *FSM) Policies() []policy.Policy {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]policy.Policy, 0, len(f.policies))
	for _, p := range f.policies {
		out = append(out, p.p)
	}
	slices.SortFunc(out, func(a, b policy.Policy) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Seeded reports whether any policy entry has been applied: a leader seeds
// the table from its flags only while it is not.
func (f *FSM) Seeded() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.seeded
}

// PolicyVersion moves on whenever the policy table may have changed
// (entries, restores); compare it to know whether something derived from
// Policies is stale.
func (f *FSM) PolicyVersion() uint64 { return f.tableVersion.Load() }
