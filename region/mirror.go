package region

import (
	"encoding/json"

	"github.com/rlnode/rlnode/policy"
)

// mirror copies the parent's global policies into the region's table
// (marked mirrored: decided only from slices) and deletes mirrored
// policies the parent no longer has. It runs on the region's leader; a
// parent that does not answer changes nothing.
func (h *Holder) mirror() {
	if !h.node.IsLeader() {
		return
	}
	ctx, cancel := h.callContext()
	defer cancel()
	raws, err := h.parent.Policies(ctx)
	if err != nil {
		h.cfg.Logger.Debug("region: reading the parent's policies failed", "err", err)
		return
	}
	globals := map[string]policy.Policy{}
	for _, raw := range raws {
		var p policy.Policy
		if json.Unmarshal(raw, &p) != nil || !p.IsGlobal() || p.Mirrored {
			continue
		}
		p.Mirrored, p.Envoy = true, nil
		if p.Validate() == nil {
			globals[p.Name] = p
		}
	}
	here := map[string]policy.Policy{}
	for _, p := range h.node.Policies() {
		here[p.Name] = p
	}
	for name, g := range globals {
		cur, ok := here[name]
		switch {
		case ok && !cur.Mirrored:
			h.cfg.Logger.Warn("region: a policy of this region has the name of a global policy of the parent; the region's own is kept, the global one is not mirrored", "policy", name)
		case !ok || !cur.Equal(g):
			if _, err := h.node.SetPolicy(ctx, g); err != nil {
				h.cfg.Logger.Warn("region: mirroring a global policy failed", "policy", name, "err", err)
			}
		}
	}
	for name, cur := range here {
		if _, ok := globals[name]; cur.Mirrored && !ok {
			if err := h.node.DeletePolicy(ctx, name); err != nil {
				h.cfg.Logger.Warn("region: deleting a global policy the parent no longer has failed", "policy", name, "err", err)
			}
		}
	}
}
