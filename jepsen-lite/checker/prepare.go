package checker

import "fmt"

// prepare checks every op against the policy table, reports the ones it
// cannot judge (a malformed op makes the run invalid rather than being
// guessed at), sets the ops of leased keys apart (by key), and partitions
// the rest into groups of keys.
func prepare(pols map[string]Policy, history []Op) ([]*group, map[string][]Op, []Violation) {
	leased := make(map[string][]Op)
	byKey := make(map[string][]Op)
	models := make(map[string]keyModel)
	var multis []Op
	var bad []Violation
	for _, op := range history {
		if err := checkOp(pols, models, op); err != nil {
			bad = append(bad, Violation{Check: CheckMalformed, Key: op.Key, Detail: err.Error(), OpIDs: []int{op.ID}})
			continue
		}
		if op.Kind == KindMulti {
			if leasedPart(pols, op) {
				bad = append(bad, Violation{Check: CheckLeasedMulti, Key: op.Key, OpIDs: []int{op.ID},
					Detail: fmt.Sprintf("op %d: a multi-key check with a leased key (the checker models leased keys alone)", op.ID)})
				continue
			}
			multis = append(multis, op)
			continue
		}
		if pols[policyName(op.Policy)].Leased {
			if op.Kind == KindHit {
				leased[op.Key] = append(leased[op.Key], op)
			}
			continue // a peek of a leased key claims nothing the checker can judge
		}
		byKey[op.Key] = append(byKey[op.Key], op)
	}
	gs, tooLarge := groups(byKey, multis, models)
	return gs, leased, append(bad, tooLarge...)
}

func leasedPart(pols map[string]Policy, op Op) bool {
	for _, p := range op.Parts {
		if pols[policyName(p.Policy)].Leased {
			return true
		}
	}
	return false
}

func policyName(p string) string {
	if p == "" {
		return DefaultPolicy
	}
	return p
}

// checkOp says why op cannot be judged, or nil; it records each key's
// policy in models, and a key must keep its policy.
func checkOp(pols map[string]Policy, models map[string]keyModel, op Op) error {
	if op.Kind != KindHit && op.Kind != KindPeek && op.Kind != KindMulti {
		return fmt.Errorf("op %d: unknown kind %q", op.ID, op.Kind)
	}
	if op.Outcome != OutcomeOK && op.Outcome != OutcomeUnknown {
		return fmt.Errorf("op %d: unknown outcome %q", op.ID, op.Outcome)
	}
	if op.Return < op.Invoke {
		return fmt.Errorf("op %d: returns (%d) before it is invoked (%d)", op.ID, op.Return, op.Invoke)
	}
	if op.Kind == KindMulti {
		if len(op.Parts) == 0 {
			return fmt.Errorf("op %d: multi-key check without hits", op.ID)
		}
		for _, p := range op.Parts {
			o := op
			o.Kind, o.Key, o.Policy, o.Parts = KindHit, p.Key, p.Policy, nil
			o.Allowed, o.Remaining, o.ResetAt, o.RetryAfterMs, o.Limits = p.Allowed, p.Remaining, p.ResetAt, p.RetryAfterMs, p.Limits
			if op.Outcome == OutcomeOK && !op.Allowed && p.Allowed {
				o.Allowed = true // would have passed: judged as a hit
			}
			if err := checkOp(pols, models, o); err != nil {
				return fmt.Errorf("op %d part %s: %w", op.ID, p.Key, err)
			}
		}
		return nil
	}
	name := policyName(op.Policy)
	p, ok := pols[name]
	if !ok {
		return fmt.Errorf("op %d: policy %q is not in the checker's table", op.ID, name)
	}
	if m, seen := models[op.Key]; seen && m.policy != name {
		return fmt.Errorf("op %d: key %q is in policy %q, earlier ops said %q", op.ID, op.Key, name, m.policy)
	}
	models[op.Key] = keyModel{policy: name, p: p}
	if op.Outcome != OutcomeOK {
		return nil
	}
	if op.Kind == KindPeek {
		if p.Algorithm != FixedWindow {
			return fmt.Errorf("op %d: the checker models peeks of fixed windows only (policy %q is %s)", op.ID, name, p.Algorithm)
		}
		if op.WindowStart < 0 {
			return fmt.Errorf("op %d: peek with negative windowStart (%d)", op.ID, op.WindowStart)
		}
		return nil
	}
	v := p.version(op.Limits)
	if v < 0 {
		return fmt.Errorf("op %d: the answer's limits %+v match no version of policy %q (%s)", op.ID, op.Limits, name, describeLimits(p))
	}
	if p.Algorithm == FixedWindow && op.ResetAt-p.Versions[v][0].WindowMs <= 0 {
		return fmt.Errorf("op %d: definite hit without a plausible resetAt (%d)", op.ID, op.ResetAt)
	}
	if p.Algorithm != FixedWindow && len(op.Limits) != len(p.Versions[v]) {
		return fmt.Errorf("op %d: a %s answer needs its per-limit detail", op.ID, p.Algorithm)
	}
	return nil
}
