package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// PoliciesPath lists the cluster's policy table (GET).
const PoliciesPath = "/v1/policies"

// Policies reads the cluster's policy table: one JSON document per
// policy, as GET /v1/policies gives them (the policy package reads
// them; the client stays free of it).
func (c *Client) Policies(ctx context.Context) ([]json.RawMessage, error) {
	a, err := c.call(ctx, http.MethodGet, PoliciesPath, nil, http.StatusOK)
	if err != nil {
		return nil, err
	}
	var w struct {
		Policies []json.RawMessage `json:"policies"`
	}
	if err := json.Unmarshal(a.body, &w); err != nil {
		return nil, &Error{Node: a.node, Status: a.status, kind: ErrOutcomeUnknown, cause: fmt.Errorf("decode policies: %w", err)}
	}
	return w.Policies, nil
}
