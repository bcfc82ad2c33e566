package httpapi

import (
	"github.com/gin-gonic/gin"

	problemdoc "github.com/rlnode/rlnode/internal/problem"
)

// Every error rlnode answers is an RFC 9457 problem document, so clients
// parse one shape whatever went wrong.
const problemJSON = problemdoc.ContentType

// Problem codes: stable, machine-readable reasons in the "code" member.
const (
	CodeInvalidClient    = "invalid_client"
	CodeMissingKey       = "missing_key"
	CodeInvalidRequest   = "invalid_request"
	CodeInvalidBackup    = "invalid_backup"
	CodeCostExceedsLimit = "cost_exceeds_limit"
	CodeQuotaExceeded    = "quota_exceeded"
	CodeOutcomeUnknown   = "outcome_unknown"
	CodeNotCounted       = "not_counted"
	CodeNoLeader         = "no_leader"
	// CodeNotMember: this node was removed from the cluster; nothing was
	// counted; another node can answer (503).
	CodeNotMember = "not_member"
	// CodeParentUnreachable: a region holds no slice of a global budget
	// and its parent lent none in time; nothing was counted (503).
	CodeParentUnreachable = "parent_unreachable"
	// CodeGlobalPolicy: a region refused a write of a global policy:
	// those are written at the parent (409).
	CodeGlobalPolicy = "global_policy"
	// CodeLeaderRefused: the leader refused this node's forwarded admin
	// call (node-to-node credentials), not the caller's (503).
	CodeLeaderRefused    = "leader_refused"
	CodeNotLeader        = "not_leader"
	CodeUnauthorized     = "unauthorized"
	CodeNotFound         = "not_found"
	CodeConflict         = "conflict"
	CodeClusterUpgrading = "cluster_upgrading"
	// CodeTableChanged: a whole-table write named a table version that
	// is no longer the table's (409); CodePreconditionRequired: it named
	// none (428).
	CodeTableChanged         = "table_changed"
	CodePreconditionRequired = "precondition_required"
	CodeTooManyPolicies      = "too_many_policies"
	CodeNotReady             = "not_ready"
	// CodeBusy: the node holds its budget of request bodies in memory;
	// nothing was read or counted, retry after Retry-After (503).
	CodeBusy     = "busy"
	CodeInternal = "internal"
)

// problem is the one problem document type, shared with the cluster's
// internal endpoints.
type problem = problemdoc.Doc

func writeProblem(c *gin.Context, status int, code, detail string) {
	c.Header("Cache-Control", "no-store")
	c.Render(status, jsonRender{contentType: problemJSON, v: problemdoc.New(status, code, detail)})
	c.Abort()
}
