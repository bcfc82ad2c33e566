package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/credential"
)

// Permit and reservation API paths (docs/budgets.md).
const (
	PermitsPath      = "/v1/permits"
	ReservationsPath = "/v1/reservations"
)

// Problem codes of permits and reservations.
const (
	CodeWrongPolicy    = "wrong_policy"
	CodeAlreadySettled = "already_settled"
	CodeTooManyPermits = "too_many_permits"
	// CodeCredentialBudget: the caller's credential holds its share
	// (429; another credential still gets its first).
	CodeCredentialBudget = "credential_budget"
)

// Permitter takes concurrency permits and reservations through the log
// (a follower forwards them to the leader): *cluster.Budgets. Each call
// validates the request once and is one call into the node.
type Permitter interface {
	AcquirePermit(ctx context.Context, req cluster.PermitRequest) (cluster.Permit, error)
	ReleasePermit(ctx context.Context, id, owner string) (cluster.Permit, error)
	RenewPermit(ctx context.Context, id, owner string, ttl time.Duration) (cluster.Permit, error)
	Reserve(ctx context.Context, req cluster.ReserveRequest) (cluster.Reservation, error)
	Settle(ctx context.Context, id, owner string, actual int64) (cluster.Settlement, error)
	PermitCounter
}

var _ Permitter = (*cluster.Budgets)(nil)

// permitIn is the body of POST /v1/permits, .../renew and
// POST /v1/reservations (one key, or several in keys).
type permitIn struct {
	Policy string                `json:"policy"`
	Client string                `json:"client"`
	TTL    string                `json:"ttl"`
	Units  int64                 `json:"units"`
	Keys   []cluster.ReserveItem `json:"keys"`
}

// permitAnswer is a permit's 201 or 200 body.
type permitAnswer struct {
	Permit    string `json:"permit"`
	Policy    string `json:"policy,omitempty"`
	Client    string `json:"client,omitempty"`
	ExpiresAt string `json:"expiresAt"`
	// ExpiresAtMs is ExpiresAt in Unix ms (cluster time).
	ExpiresAtMs int64 `json:"expiresAtMs"`
	Live        int64 `json:"live"`
	Limit       int64 `json:"limit"`
}

// owner is the credential a permit or reservation is bound to and counted
// against (internal/credential): the client certificate's fingerprint,
// else the bearer token's, else the source address (one host's anonymous
// callers are one credential; behind a proxy, all of them are: give
// applications tokens).
func owner(r *http.Request) string {
	return credential.Of(r.TLS, r.Header.Get("Authorization"), r.RemoteAddr)
}

// parseTTL reads a TTL ("30s"; empty: the default), naming the field;
// its bound is the cluster's to check (cluster.Budgets).
func parseTTL(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("ttl %q is not a Go duration such as 30s or 5m", s)
	}
	return d, nil
}

func msTime(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano) }

// acquirePermit is POST /v1/permits.
func (a *API) acquirePermit(c *gin.Context) {
	var in permitIn
	if !bindJSON(c, &in, false) {
		return
	}
	ttl, err := parseTTL(in.TTL)
	if err == nil && (in.Units != 0 || len(in.Keys) != 0) {
		err = errors.New("units, keys: a permit takes neither (POST " + ReservationsPath + " reserves units)")
	}
	if err != nil {
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, err.Error()+"; no permit was taken")
		return
	}
	ctx, cancel := a.requestContext(c)
	defer cancel()
	p, err := a.cfg.Budgets.AcquirePermit(ctx, cluster.PermitRequest{Policy: in.Policy, Client: in.Client, Owner: owner(c.Request), TTL: ttl})
	if err != nil {
		writeFailure(c, budgetFailure(err, notTaken))
		return
	}
	c.Header("Cache-Control", "no-store")
	if !p.Acquired {
		retryMs := max(1, p.RetryAt-p.Now)
		c.Header("Retry-After", strconv.FormatInt((retryMs+999)/1000, 10))
		c.Render(http.StatusTooManyRequests, jsonRender{contentType: problemJSON, v: gin.H{
			"type": "https://iana.org/assignments/http-problem-types#quota-exceeded", "title": "Concurrency limit reached",
			"status": http.StatusTooManyRequests, "code": CodeQuotaExceeded,
			"detail": fmt.Sprintf("client %q holds %d of %d permits of policy %q; the earliest ends in %d ms", in.Client, p.Live, p.Limit, in.Policy, retryMs),
			"policy": in.Policy, "client": in.Client, "live": p.Live, "limit": p.Limit, "retryAfterMs": retryMs,
		}})
		return
	}
	c.Render(http.StatusCreated, jsonRender{contentType: "application/json; charset=utf-8", v: permitAnswer{Permit: p.ID,
		Policy: p.Policy, Client: p.Client, ExpiresAt: msTime(p.ExpiresAt), ExpiresAtMs: p.ExpiresAt, Live: p.Live, Limit: p.Limit}})
}

// releasePermit is DELETE /v1/permits/:id.
func (a *API) releasePermit(c *gin.Context) {
	ctx, cancel := a.requestContext(c)
	defer cancel()
	p, err := a.cfg.Budgets.ReleasePermit(ctx, c.Param("id"), owner(c.Request))
	if err != nil {
		writeFailure(c, budgetFailure(err, notReleased))
		return
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, gin.H{"permit": p.ID, "released": true, "live": p.Live, "limit": p.Limit})
}

// renewPermit is POST /v1/permits/:id/renew.
func (a *API) renewPermit(c *gin.Context) {
	var in permitIn
	if !bindJSON(c, &in, true) {
		return
	}
	ttl, err := parseTTL(in.TTL)
	if err == nil && (in.Policy != "" || in.Client != "" || in.Units != 0 || len(in.Keys) != 0) {
		err = errors.New("a renew takes only ttl (the permit names its key)")
	}
	if err != nil {
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, err.Error()+"; the permit was not renewed")
		return
	}
	ctx, cancel := a.requestContext(c)
	defer cancel()
	p, err := a.cfg.Budgets.RenewPermit(ctx, c.Param("id"), owner(c.Request), ttl)
	if err != nil {
		writeFailure(c, budgetFailure(err, notRenewed))
		return
	}
	c.Header("Cache-Control", "no-store")
	c.Render(http.StatusOK, jsonRender{contentType: "application/json; charset=utf-8", v: permitAnswer{Permit: p.ID,
		Policy: p.Policy, Client: p.Client, ExpiresAt: msTime(p.ExpiresAt), ExpiresAtMs: p.ExpiresAt, Live: p.Live, Limit: p.Limit}})
}
