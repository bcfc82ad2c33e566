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
	ttl, err := parseTTL(in.TTL)
	req := cluster.ReserveRequest{Owner: owner(c.Request), TTL: ttl, Items: in.Keys}
	switch {
	case err != nil:
	case len(in.Keys) > 0 && (in.Policy != "" || in.Client != "" || in.Units != 0):
		err = fmt.Errorf("keys: give either keys or policy, client and units")
	case len(in.Keys) == 0:
		if in.Policy == "" {
			in.Policy = a.cfg.Policy
		}
		req.Items, req.Single = []cluster.ReserveItem{{Policy: in.Policy, Client: in.Client, Units: in.Units}}, true
	}
	if err != nil {
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, err.Error()+"; nothing was reserved")
		return
	}
	ctx, cancel := a.requestContext(c)
	defer cancel()
	r, err := a.cfg.Budgets.Reserve(ctx, req)
	if err != nil {
		writeFailure(c, budgetFailure(err, notReserved))
		return
	}
	c.Header("Cache-Control", "no-store")
	if !r.Reserved {
		retryMs, never := int64(0), false
		for _, k := range r.Keys {
			if !k.Allowed {
				retryMs = max(retryMs, k.RetryAfterMs)
				never = never || k.RetryAfterMs < 0
			}
		}
		if never {
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

// settle is POST /v1/reservations/:id/settle {"units": ACTUAL}.
func (a *API) settle(c *gin.Context) {
	var in struct {
		Units *int64 `json:"units"`
	}
	if !bindJSON(c, &in, false) {
		return
	}
	if in.Units == nil {
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("units: the actual units used, 0 to %d; nothing was settled", int64(policy.MaxLimit)))
		return
	}
	ctx, cancel := a.requestContext(c)
	defer cancel()
	s, err := a.cfg.Budgets.Settle(ctx, c.Param("id"), owner(c.Request), *in.Units)
	if err != nil {
		writeFailure(c, budgetFailure(err, notSettled))
		return
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, s)
}
