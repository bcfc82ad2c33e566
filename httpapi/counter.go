package httpapi

import (
	"context"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/policy"
)

// CounterAdmin writes a key's count through the log.
type CounterAdmin interface {
	WriteCounter(ctx context.Context, c cluster.Counter) (cluster.CheckResult, error)
}

// CounterRequest is the body of POST /v1/windows/:policy/:client: exactly
// one of Set (0 or more, within the policy's limit) and Inc (1 or more).
type CounterRequest struct {
	Set *int64 `json:"set,omitempty"`
	Inc *int64 `json:"inc,omitempty"`
}

// CodeOverLimit answers a set above the policy's limit.
const CodeOverLimit = "over_limit"

// writeCounter is POST /v1/windows/:policy/:client with {"set": N} (the
// key's used count becomes N, within the policy's limit; 0 forgets it) or
// {"inc": N} (N hits counted without a limit check), for admins migrating
// counters or charging work done elsewhere.
func (a *API) writeCounter(c *gin.Context) {
	pol, client, ok := keyParams(c)
	if !ok {
		return
	}
	var req CounterRequest
	if !bindJSON(c, &req, false) {
		return
	}
	w := cluster.Counter{Policy: pol, Client: client}
	switch {
	case (req.Set == nil) == (req.Inc == nil):
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, `give exactly one of {"set": N} (the used count becomes N) and {"inc": N} (count N without a limit check)`)
		return
	case req.Set != nil && (*req.Set < 0 || *req.Set > policy.MaxLimit):
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("set %d: want 0 to %d", *req.Set, int64(policy.MaxLimit)))
		return
	case req.Inc != nil && (*req.Inc < 1 || *req.Inc > policy.MaxLimit):
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("inc %d: want 1 to %d", *req.Inc, int64(policy.MaxLimit)))
		return
	case req.Set != nil:
		w.Kind, w.N = fsm.CounterSet, *req.Set
	default:
		w.Kind, w.N = fsm.CounterInc, *req.Inc
	}
	ctx, cancel := a.requestContext(c)
	defer cancel()
	res, err := a.cfg.Node.WriteCounter(ctx, w)
	if err != nil {
		a.adminError(c, fmt.Sprintf("write %s/%s", pol, client), err)
		return
	}
	c.Header(cluster.HeaderServedBy, res.ServedBy)
	c.JSON(http.StatusOK, bodyOf(res.Hits[0], true, true))
}
