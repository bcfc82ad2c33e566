package httpapi

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// Every error rlnode answers is an RFC 9457 problem document, so clients
// parse one shape whatever went wrong.
const problemJSON = "application/problem+json"

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
	CodeNotLeader        = "not_leader"
	CodeUnauthorized     = "unauthorized"
	CodeNotFound         = "not_found"
	CodeConflict         = "conflict"
	CodeTooManyPolicies  = "too_many_policies"
	CodeNotReady         = "not_ready"
	CodeInternal         = "internal"
)

type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
}

func writeProblem(c *gin.Context, status int, code, detail string) {
	c.Header("Cache-Control", "no-store")
	c.Render(status, jsonRender{contentType: problemJSON, v: problem{
		Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail, Code: code,
	}})
	c.Abort()
}
