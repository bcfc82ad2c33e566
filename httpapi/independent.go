package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/wire"
	"github.com/rlnode/rlnode/window"
)

// IndependentChecker decides hits each on its own (cluster.Node.CheckEach):
// POST /v1/check with "independent": true.
type IndependentChecker interface {
	CheckEach(ctx context.Context, hits []cluster.Hit) ([]cluster.CheckResult, []error)
}

var _ IndependentChecker = (*cluster.Node)(nil)

// itemProblem is why one hit of an independent check was not decided.
type itemProblem struct {
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

// independentResult is one hit's answer: its decision, or its error.
type independentResult struct {
	wire.CheckBody
	Error *itemProblem `json:"error,omitempty"`
}

type independentBody struct {
	Independent bool                `json:"independent"`
	Results     []independentResult `json:"results"`
}

// checkIndependent answers POST /v1/check with "independent": true: up to
// cluster.MaxIndependent hits, each decided on its own (one refused takes
// nothing from the others), 200 with one result per hit in order; a hit
// that cannot be decided (a bad field, an unknown policy, a cost never
// allowed, a failure) carries its error, never failing the others.
func (a *API) checkIndependent(c *gin.Context, req *wire.CheckManyRequest, start time.Time) {
	each, ok := a.cfg.Node.(IndependentChecker)
	if !ok {
		writeProblem(c, http.StatusNotImplemented, CodeInvalidRequest, "this node cannot decide independent checks")
		return
	}
	if len(req.Hits) == 0 || len(req.Hits) > cluster.MaxIndependent {
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("hits: %d hits, want 1 to %d with \"independent\": true", len(req.Hits), cluster.MaxIndependent))
		return
	}
	body := independentBody{Independent: true, Results: make([]independentResult, len(req.Hits))}
	var hits []cluster.Hit
	var at []int
	for i, h := range req.Hits {
		hit := cluster.Hit{Policy: h.Policy, Client: h.Client, Cost: 1}
		if hit.Policy == "" {
			hit.Policy = a.cfg.Policy
		}
		if h.Cost != nil {
			hit.Cost = *h.Cost
		}
		r := &body.Results[i]
		r.Policy, r.Client = hit.Policy, hit.Client
		if err := validHit(hit); err != nil {
			r.Error = &itemProblem{CodeInvalidRequest, err.Error()}
			continue
		}
		if p, ok := a.cfg.Node.Policy(hit.Policy); ok && p.IsConcurrency() {
			r.Error = &itemProblem{CodeWrongPolicy, fmt.Sprintf("policy %q counts concurrent permits: take one with POST /v1/permits", hit.Policy)}
			continue
		}
		hits, at = append(hits, hit), append(at, i)
	}
	if len(hits) > 0 {
		ctx, cancel := a.requestContext(c)
		defer cancel()
		results, errs := each.CheckEach(ctx, hits)
		for j, res := range results {
			r := &body.Results[at[j]]
			switch {
			case errs[j] != nil:
				f := hitFailure(errs[j])
				r.Error = &itemProblem{f.code, f.detail}
			case len(res.Hits) != 1:
				r.Error = &itemProblem{CodeOutcomeUnknown, "no decision came back for this hit"}
			case res.Hits[0].UnknownPolicy:
				r.Error = &itemProblem{CodeUnknownPolicy, fmt.Sprintf("policy %q is not defined (GET /v1/policies lists them); nothing was counted", hits[j].Policy)}
			case res.Hits[0].Outcome == window.CostExceedsLimit:
				r.CheckBody = bodyOf(res.Hits[0], false, true)
				r.Error = &itemProblem{CodeCostExceedsLimit, fmt.Sprintf("cost %d exceeds what policy %q could ever allow: never retry", hits[j].Cost, hits[j].Policy)}
			default:
				r.CheckBody = bodyOf(res.Hits[0], res.Allowed, true)
				r.Decided = decidedOf(res.Decided)
			}
		}
	}
	a.observeCheck("multi", "independent", start)
	c.Header("Cache-Control", "no-store")
	c.Render(http.StatusOK, jsonRender{contentType: "application/json; charset=utf-8", v: body})
}
