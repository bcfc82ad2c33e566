package policy

import (
	"errors"
	"fmt"
)

// Global is Policy.Scope's value for a budget shared by regional
// clusters: it is defined at the parent cluster and lent to each region
// through lease grants (the region's slices).
const Global = "global"

// IsGlobal reports whether the policy is a global budget (at the parent,
// or a region's mirror of it).
func (p Policy) IsGlobal() bool { return p.Scope == Global }

// scopeErrs checks scope and mirrored. A global budget is lent to the
// regions as leases, so it must be leased; it has one limit (a slice is
// one grant of one limit's window) and no shadow mode.
func (p Policy) scopeErrs() []error {
	var errs []error
	switch p.Scope {
	case "":
		if p.Mirrored {
			errs = append(errs, errors.New("mirrored: only a global policy is mirrored from a parent"))
		}
	case Global:
		if !p.IsLeased() {
			errs = append(errs, errors.New(`scope global: a global budget is lent to regions as leases: set "consistency": "leased"`))
		}
		if p.IsConcurrency() {
			errs = append(errs, errors.New("scope global: a concurrency policy cannot be global"))
		}
		if len(p.Limits) != 1 {
			errs = append(errs, fmt.Errorf("scope global: a global policy has exactly one limit, got %d", len(p.Limits)))
		}
	default:
		errs = append(errs, fmt.Errorf("scope %q is unknown: want global or nothing", p.Scope))
	}
	return errs
}
