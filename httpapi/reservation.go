package httpapi

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/policy"
)

// reservationAnswer is a reservation's 201 body (and a 429's keys).
type reservationAnswer struct {
	Reservation string                `json:"reservation"`
	ExpiresAt   string                `json:"expiresAt"`
	ExpiresAtMs int64                 `json:"expiresAtMs"`
	Keys        []cluster.ReservedKey `json:"keys"`
}

// reserve is POST /v1/reservations: one key (policy, client, units) or
// several (keys), all or nothing.
func (a *API) reserve(c *gin.Context) {
	var in permitIn
	if !bindJSON(c, &in, false) {
		return
	}
	ttl, err := a.parseTTL(in.TTL)
	items := in.Keys
	switch {
	case err != nil:
	case len(in.Keys) > 0 && (in.Policy != "" || in.Client != "" || in.Units != 0):
		err = fmt.Errorf("keys: give either keys or policy, client and units")
	case len(in.Keys) == 0:
		if in.Policy == "" {
			in.Policy = a.cfg.Policy
		}
		items = []cluster.ReserveItem{{Policy: in.Policy, Client: in.Client, Units: in.Units}}
	case len(in.Keys) > cluster.MaxReservationKeys:
		err = fmt.Errorf("keys: %d keys, at most %d", len(in.Keys), cluster.MaxReservationKeys)
	}
	for i, it := range items {
		if err != nil {
			break
		}
		at := ""
		if len(in.Keys) > 0 {
			at = fmt.Sprintf("keys[%d].", i)
		}
		switch {
		case policy.ValidateName(it.Policy) != nil:
			err = fmt.Errorf("%spolicy: %w", at, policy.ValidateName(it.Policy))
		case cluster.ValidateClient(it.Client) != nil:
			err = fmt.Errorf("%sclient: %w", at, cluster.ValidateClient(it.Client))
		case it.Units < 1 || it.Units > policy.MaxLimit:
			err = fmt.Errorf("%sunits %d: reserve 1 to %d", at, it.Units, int64(policy.MaxLimit))
		}
	}
	if err != nil {
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, err.Error()+"; nothing was reserved")
		return
	}
	for i, it := range items {
		if !a.reservablePolicy(c, i, len(in.Keys) > 0, it) {
			return
		}
	}
	ctx, cancel := a.requestContext(c)
	defer cancel()
	r, err := a.cfg.Node.Reserve(ctx, cluster.ReserveRequest{Owner: owner(c.Request), TTL: ttl, Items: items})
	if err != nil {
		a.permitError(c, err)
		return
	}
	c.Header("Cache-Control", "no-store")
	if !r.Reserved {
		retryMs := int64(0)
		for _, k := range r.Keys {
			if !k.Allowed {
				retryMs = max(retryMs, k.RetryAfterMs)
			}
		}
		if retryMs < 0 {
			writeProblem(c, http.StatusUnprocessableEntity, CodeCostExceedsLimit, "units exceed what a policy could ever allow: this reservation can never be made, do not retry")
			return
		}
		c.Header("Retry-After", strconv.FormatInt(max(1, (retryMs+999)/1000), 10))
		c.Render(http.StatusTooManyRequests, jsonRender{contentType: problemJSON, v: gin.H{
			"type": "https://iana.org/assignments/http-problem-types#quota-exceeded", "title": "Request quota exceeded",
			"status": http.StatusTooManyRequests, "code": CodeQuotaExceeded,
			"detail": fmt.Sprintf("a key has no room for its units; nothing was reserved; retry in %d ms", retryMs),
			"keys":   r.Keys, "retryAfterMs": retryMs,
		}})
		return
	}
	c.Render(http.StatusCreated, jsonRender{contentType: "application/json; charset=utf-8", v: reservationAnswer{
		Reservation: r.ID, ExpiresAt: msTime(r.ExpiresAt), ExpiresAtMs: r.ExpiresAt, Keys: r.Keys}})
}

// reservablePolicy answers 404 or 400 itself unless the item's policy is
// a strict windowed one (in this node's table, else the leader's).
func (a *API) reservablePolicy(c *gin.Context, i int, many bool, it cluster.ReserveItem) bool {
	at := "policy"
	if many {
		at = fmt.Sprintf("keys[%d].policy", i)
	}
	p, found, ok := a.findPolicy(c, it.Policy)
	switch {
	case !ok:
	case !found:
		writeProblem(c, http.StatusNotFound, CodeUnknownPolicy, fmt.Sprintf("%s: policy %q is not defined (GET /v1/policies lists them); nothing was reserved", at, it.Policy))
	case p.IsConcurrency():
		writeProblem(c, http.StatusBadRequest, CodeWrongPolicy, fmt.Sprintf("%s: %q is a concurrency policy: it counts permits (POST %s), not units; nothing was reserved", at, it.Policy, PermitsPath))
	case p.IsLeased():
		writeProblem(c, http.StatusBadRequest, CodeWrongPolicy, fmt.Sprintf("%s: %q is leased: reservations need a strict policy; nothing was reserved", at, it.Policy))
	default:
		return true
	}
	return false
}

// settle is POST /v1/reservations/:id/settle {"units": ACTUAL}.
func (a *API) settle(c *gin.Context) {
	var in struct {
		Units *int64 `json:"units"`
	}
	if !bindJSON(c, &in, false) {
		return
	}
	if in.Units == nil || *in.Units < 0 || *in.Units > policy.MaxLimit {
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("units: the actual units used, 0 to %d; nothing was settled", int64(policy.MaxLimit)))
		return
	}
	ctx, cancel := a.requestContext(c)
	defer cancel()
	s, err := a.cfg.Node.Settle(ctx, c.Param("id"), owner(c.Request), *in.Units)
	if err != nil {
		a.permitError(c, err)
		return
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, s)
}
