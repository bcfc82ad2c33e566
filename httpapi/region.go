package httpapi

import (
	"context"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/rlnode/rlnode/policy"
)

// scopeAllowed refuses (409 global_policy) a policy write that a caller
// may not make here: a global policy on a region's node (the parent
// defines it and the region mirrors it), and a mirrored policy anywhere
// (only the region's own holder writes those, not through this API).
func (a *API) scopeAllowed(c *gin.Context, ps []policy.Policy) bool {
	for _, p := range ps {
		switch {
		case p.Mirrored:
			writeProblem(c, http.StatusConflict, CodeGlobalPolicy, fmt.Sprintf("policy %q: mirrored policies are written by a region's holder from its parent's table, never through the API; nothing changed", p.Name))
			return false
		case p.IsGlobal() && a.cfg.Region != "":
			writeProblem(c, http.StatusConflict, CodeGlobalPolicy, fmt.Sprintf("policy %q: this node is in region %q: global policies are written at the parent (%s) and mirrored here within seconds; nothing changed", p.Name, a.cfg.Region, a.cfg.Parent))
			return false
		}
	}
	for _, p := range ps {
		if q, ok := a.cfg.Node.Policy(p.Name); ok && q.Mirrored {
			writeProblem(c, http.StatusConflict, CodeGlobalPolicy, fmt.Sprintf("policy %q is the parent's global policy, mirrored here: change it at the parent (%s); nothing changed", p.Name, a.cfg.Parent))
			return false
		}
	}
	return true
}

// keepMirrored adds the parent's mirrored policies to a whole-table
// write on a region's node: replacing the region's own policies must not
// delete the global ones (the mirror would only write them back).
func (a *API) keepMirrored(ctx context.Context, ps []policy.Policy) []policy.Policy {
	if a.cfg.Region == "" {
		return ps
	}
	table, err := a.cfg.Node.ReadPolicies(ctx, true)
	if err != nil {
		return ps // the mirror writes them back within seconds
	}
	listed := map[string]bool{}
	for _, p := range ps {
		listed[p.Name] = true
	}
	for _, q := range table.Policies {
		if q.Mirrored && !listed[q.Name] {
			ps = append(ps, q)
		}
	}
	return ps
}
