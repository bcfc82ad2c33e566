package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/policy"
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
)

// Permitter takes concurrency permits and reservations through the log
// (a follower forwards them to the leader).
type Permitter interface {
	AcquirePermit(ctx context.Context, req cluster.PermitRequest) (cluster.Permit, error)
	ReleasePermit(ctx context.Context, id, owner string) (cluster.Permit, error)
	RenewPermit(ctx context.Context, id, owner string, ttl time.Duration) (cluster.Permit, error)
	Reserve(ctx context.Context, req cluster.ReserveRequest) (cluster.Reservation, error)
	Settle(ctx context.Context, id, owner string, actual int64) (cluster.Settlement, error)
	// MaxPermitTTL is the longest TTL the node accepts.
	MaxPermitTTL() time.Duration
}

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

// owner is the credential identity a permit or reservation is bound to:
// the client certificate's or bearer token's fingerprint, "" without one.
func owner(r *http.Request) string {
	if s := holderScope(r); s != "anon" {
		return s
	}
	return ""
}

// parseTTL reads a TTL ("30s"; empty: the default), naming the field.
func (a *API) parseTTL(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("ttl %q is not a Go duration such as 30s or 5m", s)
	}
	if bound := a.cfg.Node.MaxPermitTTL(); d < time.Millisecond || d > bound {
		return 0, fmt.Errorf("ttl %s: want 1ms to %s (this node's --max-permit-ttl; leave it out for %s)", d, bound, min(cluster.DefaultPermitTTL, bound))
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
	ttl, err := a.parseTTL(in.TTL)
	switch {
	case err != nil:
	case policy.ValidateName(in.Policy) != nil:
		err = fmt.Errorf("policy: %w", policy.ValidateName(in.Policy))
	case cluster.ValidateClient(in.Client) != nil:
		err = fmt.Errorf("client: %w", cluster.ValidateClient(in.Client))
	case in.Units != 0 || len(in.Keys) != 0:
		err = errors.New("units, keys: a permit takes neither (POST " + ReservationsPath + " reserves units)")
	}
	if err != nil {
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, err.Error()+"; no permit was taken")
		return
	}
	if !a.concurrencyPolicy(c, in.Policy) {
		return
	}
	ctx, cancel := a.requestContext(c)
	defer cancel()
	p, err := a.cfg.Node.AcquirePermit(ctx, cluster.PermitRequest{Policy: in.Policy, Client: in.Client, Owner: owner(c.Request), TTL: ttl})
	if err != nil {
		a.permitError(c, err)
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

// concurrencyPolicy answers 404 or 400 itself unless name is a
// concurrency policy (in this node's table, else the leader's).
func (a *API) concurrencyPolicy(c *gin.Context, name string) bool {
	p, found, ok := a.findPolicy(c, name)
	switch {
	case !ok:
	case !found:
		writeProblem(c, http.StatusNotFound, CodeUnknownPolicy, fmt.Sprintf("policy %q is not defined (GET /v1/policies lists them); no permit was taken", name))
	case !p.IsConcurrency():
		writeProblem(c, http.StatusBadRequest, CodeWrongPolicy, fmt.Sprintf("policy: %q is a %s policy; permits need a concurrency policy ({\"algorithm\":\"concurrency\",\"limits\":[{\"limit\":N}]})", name, p.Algorithm))
	default:
		return true
	}
	return false
}

// releasePermit is DELETE /v1/permits/:id.
func (a *API) releasePermit(c *gin.Context) {
	ctx, cancel := a.requestContext(c)
	defer cancel()
	p, err := a.cfg.Node.ReleasePermit(ctx, c.Param("id"), owner(c.Request))
	if err != nil {
		a.permitError(c, err)
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
	ttl, err := a.parseTTL(in.TTL)
	if err == nil && (in.Policy != "" || in.Client != "" || in.Units != 0 || len(in.Keys) != 0) {
		err = errors.New("a renew takes only ttl (the permit names its key)")
	}
	if err != nil {
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, err.Error()+"; the permit was not renewed")
		return
	}
	ctx, cancel := a.requestContext(c)
	defer cancel()
	p, err := a.cfg.Node.RenewPermit(ctx, c.Param("id"), owner(c.Request), ttl)
	if err != nil {
		a.permitError(c, err)
		return
	}
	c.Header("Cache-Control", "no-store")
	c.Render(http.StatusOK, jsonRender{contentType: "application/json; charset=utf-8", v: permitAnswer{Permit: p.ID,
		Policy: p.Policy, Client: p.Client, ExpiresAt: msTime(p.ExpiresAt), ExpiresAtMs: p.ExpiresAt, Live: p.Live, Limit: p.Limit}})
}

// permitError answers a permit or reservation call that failed.
func (a *API) permitError(c *gin.Context, err error) {
	detail := firstLine(err)
	switch {
	case errors.Is(err, cluster.ErrNotFound) && strings.HasSuffix(c.FullPath(), "/settle"):
		writeProblem(c, http.StatusNotFound, CodeNotFound, "no live reservation of yours with this id: if it expired (its TTL ended before this settle), the units it reserved stayed charged in full and nothing is given back or charged now; else it was never made or was made with another credential. Settle before the TTL, or reserve with a longer ttl (at most 1h)")
	case errors.Is(err, cluster.ErrNotFound):
		writeProblem(c, http.StatusNotFound, CodeNotFound, "no such permit or reservation of yours (never made, released, expired, or taken with another credential)")
	case errors.Is(err, cluster.ErrAlreadySettled):
		writeProblem(c, http.StatusConflict, CodeAlreadySettled, "the reservation was settled already; nothing changed")
	case errors.Is(err, cluster.ErrUnknownPolicy):
		writeProblem(c, http.StatusNotFound, CodeUnknownPolicy, detail+"; nothing was taken")
	case errors.Is(err, cluster.ErrWrongPolicy):
		writeProblem(c, http.StatusBadRequest, CodeWrongPolicy, detail+"; nothing was taken")
	case errors.Is(err, cluster.ErrBadRequest):
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, badInput(err)+"; nothing was taken")
	case errors.Is(err, cluster.ErrClusterUpgrading):
		// Not a hit: say what was not made, without "the hit was not counted".
		writeProblem(c, http.StatusConflict, CodeClusterUpgrading, upgradingDetail(err)+"; "+notMade(c))
	case errors.Is(err, cluster.ErrTooManyPermits):
		f, _ := bound(err)
		writeFailure(c, f)
	case errors.Is(err, cluster.ErrConflict):
		writeProblem(c, http.StatusConflict, CodeConflict, detail+"; nothing was reserved")
	default:
		a.hitError(c, err)
	}
}

// upgradingDetail is the version gate's refusal (the format needed, the
// voters behind, what to do) without the hit path's "not counted".
func upgradingDetail(err error) string {
	var ue *cluster.UpgradingError
	if errors.As(err, &ue) {
		return ue.Error()
	}
	d := firstLine(err) // carried back from the leader as text
	for _, sep := range []string{": ", "; "} {
		d = strings.ReplaceAll(d, cluster.ErrNotCounted.Error()+sep, "")
	}
	return d
}

// notMade says what a refused permit or reservation call did not do, by
// its route.
func notMade(c *gin.Context) string {
	route := c.FullPath()
	switch {
	case strings.HasSuffix(route, "/settle"):
		return "the reservation was not settled"
	case strings.HasPrefix(route, ReservationsPath):
		return "the reservation was not made"
	case strings.HasSuffix(route, "/renew"):
		return "the permit was not renewed"
	case c.Request != nil && c.Request.Method == http.MethodDelete:
		return "the permit was not released"
	}
	return "no permit was taken"
}

// badInput is the message of a request the cluster refused for its input,
// without the outcome words it was joined with.
func badInput(err error) string {
	var parts []string
	for _, line := range strings.Split(err.Error(), "\n") {
		if line != cluster.ErrNotCounted.Error() && line != cluster.ErrBadRequest.Error() {
			parts = append(parts, line)
		}
	}
	return strings.Join(parts, "; ")
}
