package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/policy"
	"github.com/rlnode/rlnode/topkeys"
)

// TopView is the cluster-wide view of the most-hit clients
// and of every member's status, each collected over the internal path
// (*cluster.Views provides it).
type TopView interface {
	ClusterTop(ctx context.Context, policy string, n int, history bool) cluster.ClusterTop
	Members(ctx context.Context) ([]cluster.Member, error)
}

// PermitCounter counts live permits per concurrency policy in this
// node's state.
type PermitCounter interface {
	LivePermitsByPolicy() map[string]int64
}

var _ PermitCounter = (*cluster.Budgets)(nil)

// members is GET /v1/cluster/members: every server's own status (role,
// term, indexes, lag, last contact, clock skew, disk use), or why it did
// not answer.
func (a *API) members(c *gin.Context) {
	ctx, cancel := a.requestContext(c)
	defer cancel()
	ms, err := a.cfg.Views.Members(ctx)
	if err != nil {
		writeProblem(c, http.StatusServiceUnavailable, CodeNoLeader, firstLine(err))
		return
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, gin.H{"members": ms, "asked": a.cfg.Node.ID()})
}

// MaxTopKeys is the most keys /v1/top lists per policy.
const MaxTopKeys = 100

// TopPolicy is one policy of a /v1/top answer.
type TopPolicy struct {
	Policy string `json:"policy"`
	// Allowed and Refused are the hits in the window; the rates are
	// per second over it.
	Allowed       uint64  `json:"allowed"`
	Refused       uint64  `json:"refused"`
	AllowedPerSec float64 `json:"allowedPerSec"`
	RefusedPerSec float64 `json:"refusedPerSec"`
	// WouldRefuse counts hits a shadow policy let through that enforcing
	// would have refused (in neither Allowed nor Refused).
	WouldRefuse uint64 `json:"wouldRefuse,omitempty"`
	// Keys are the top clients by the asked outcome; each one's true
	// count lies in [min, count]. Unlisted is the most any other client
	// may have; Exact says every count is exact.
	Keys     []topkeys.Key `json:"keys"`
	Unlisted uint64        `json:"unlisted"`
	Exact    bool          `json:"exact"`
}

// TopBody is the answer of GET /v1/top (rlnode top reads it too).
type TopBody struct {
	By       string `json:"by"`
	WindowMs int64  `json:"windowMs"`
	// Accuracy words the error bound for people.
	Accuracy string            `json:"accuracy"`
	Dropped  uint64            `json:"dropped"`
	Nodes    []cluster.TopNode `json:"nodes"`
	Policies []TopPolicy       `json:"policies"`
	// Permits are the permits live per concurrency policy (0 for one with
	// none) in the answering node's state, as of the last entry it
	// applied; with ?policy=, that policy's only.
	Permits map[string]int64 `json:"permits"`
	// History (with ?history=1) is each policy's hits per step over the
	// last minutes, merged from every node: what the status page charts,
	// so a page opened now shows what just happened.
	History []topkeys.PolicyHistory `json:"history,omitempty"`
}

// top is GET /v1/top?policy=&by=refused|allowed|would_refuse&n=&history=1: the clients hit most in
// the last minute, merged from every node's summaries. Client ids are
// personal data: the endpoint is behind the admin guard.
func (a *API) top(c *gin.Context) {
	by := c.DefaultQuery("by", "refused")
	if by != "refused" && by != "allowed" && by != "would_refuse" {
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("by %q: want refused, allowed or would_refuse", by))
		return
	}
	n := 10
	if s, ok := c.GetQuery("n"); ok {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > MaxTopKeys {
			writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("n %q: want a whole number from 1 to %d", s, MaxTopKeys))
			return
		}
		n = v
	}
	history := c.DefaultQuery("history", "0")
	if history != "0" && history != "1" {
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("history %q: want 1 (with the hits per 5 s over the last 10 minutes) or 0", history))
		return
	}
	pol := c.Query("policy")
	if pol != "" {
		if err := policy.ValidateName(pol); err != nil {
			writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, "policy "+err.Error())
			return
		}
	}
	ctx, cancel := a.requestContext(c)
	defer cancel()
	ct := a.cfg.Views.ClusterTop(ctx, pol, n, history == "1")
	body := TopBody{By: by, WindowMs: ct.WindowMs, Dropped: ct.Dropped, Nodes: ct.Nodes, Policies: []TopPolicy{},
		Accuracy: fmt.Sprintf("space-saving, %d counters per policy, outcome, node and 10 s bucket: each count is at most N/%d above the truth (N: that part's hits), min is never above it", ct.K, ct.K)}
	body.History = ct.History
	body.Permits = map[string]int64{}
	if a.cfg.Budgets != nil {
		body.Permits = a.cfg.Budgets.LivePermitsByPolicy()
	}
	if live, ok := body.Permits[pol]; pol != "" {
		body.Permits = map[string]int64{}
		if ok {
			body.Permits[pol] = live
		}
	}
	secs := float64(max(ct.WindowMs, 1000)) / 1000
	for _, p := range ct.Policies {
		l := p.Refused
		switch by {
		case "allowed":
			l = p.Allowed
		case "would_refuse":
			l = p.WouldRefuse
		}
		body.Policies = append(body.Policies, TopPolicy{Policy: p.Policy, Allowed: p.Allowed.Total, Refused: p.Refused.Total,
			AllowedPerSec: float64(p.Allowed.Total) / secs, RefusedPerSec: float64(p.Refused.Total) / secs,
			WouldRefuse: p.WouldRefuse.Total, Keys: l.Keys, Unlisted: l.Unlisted, Exact: l.Exact() && ct.Dropped == 0})
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, body)
}
