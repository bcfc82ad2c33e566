package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/wire"
	"github.com/rlnode/rlnode/policy"
	"github.com/rlnode/rlnode/window"
)

// HeaderShadow marks an answer a shadow policy let through that enforcing
// would have refused; its one value is ShadowWouldRefuse.
const (
	HeaderShadow      = "X-Rlnode-Shadow"
	ShadowWouldRefuse = "would-refuse"
)

// resultWouldRefuse is the checks metric's result for such a hit.
const resultWouldRefuse = "would_refuse"

type quotaProblem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
	wire.CheckBody
}

// costProblem is the 422 body: retryAfterMs is null, never a number.
type costProblem struct {
	problem
	Policy       string           `json:"policy"`
	Limits       []wire.LimitBody `json:"limits,omitempty"` // absent when the node refused before the log (no window was read)
	RetryAfterMs *int64           `json:"retryAfterMs"`
}

// CodeUnknownPolicy answers a check or read of a policy not in the table.
const CodeUnknownPolicy = "unknown_policy"

// checkDefault is GET /check/:client: the default policy.
func (a *API) checkDefault(c *gin.Context) { a.checkOne(c, a.cfg.Policy, c.Param("a")) }

// checkNamed is GET /check/:policy/:client.
func (a *API) checkNamed(c *gin.Context) { a.checkOne(c, c.Param("a"), c.Param("b")) }

func (a *API) checkOne(c *gin.Context, policyName, client string) {
	start := time.Now()
	cost, costErr := int64(1), ""
	if c.Request.URL.RawQuery != "" { // no query, nothing to parse
		if s, given := c.GetQuery("cost"); given {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil || v < 1 || v > policy.MaxLimit+1 {
				costErr = fmt.Sprintf("cost %q must be a whole number from 1 to %d", s, int64(policy.MaxLimit+1))
			} else {
				cost = v
			}
		}
	}
	// The client and the policy name are checked before the cost, so a
	// bad client is named first.
	hit, err := cluster.ValidateHit(policyName, client, cost)
	switch {
	case err != nil:
		invalidHit(c, err, "")
		return
	case costErr != "":
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, costErr)
		return
	}
	a.decideOne(c, oneCheck{hit: hit, start: start, refuse: http.StatusTooManyRequests, refusedDetail: checkRefusedDetail})
}

// checkRefusedDetail words a refusal of GET /check.
func checkRefusedDetail(h cluster.HitResult, p policy.Policy, known bool, m window.Result, retryMs int64) string {
	return fmt.Sprintf("client %q is over policy %q (%s); retry in %d ms", h.Client, h.Policy, limitWords(p, known, m), retryMs)
}

// invalidHit answers a hit cluster.ValidateHit refused: a bad client id is
// the request's fault (400), a policy name that cannot exist is not found.
func invalidHit(c *gin.Context, err error, prefix string) {
	var ih *cluster.InvalidHitError
	switch {
	case errors.As(err, &ih) && ih.Field == "client":
		writeProblem(c, http.StatusBadRequest, CodeInvalidClient, prefix+ih.Err.Error())
	case errors.As(err, &ih) && ih.Field == "policy":
		writeProblem(c, http.StatusNotFound, CodeUnknownPolicy, prefix+"policy "+ih.Err.Error())
	default:
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, prefix+err.Error())
	}
}

// limitWords says the limit behind a result as people think of it: "10
// per 1m", and for a token bucket its rate and burst ("10 per 1s, burst
// 20"), not its capacity as if that were the rate.
func limitWords(p policy.Policy, known bool, m window.Result) string {
	if known && p.Alg() == window.TokenBucket {
		for _, l := range p.Limits {
			if time.Duration(l.Window).Milliseconds() == m.WindowMs {
				return bucketWords(l)
			}
		}
	}
	return fmt.Sprintf("%d per %s", m.Limit, policy.Duration(time.Duration(m.WindowMs)*time.Millisecond))
}

// bucketWords is a token bucket limit's rate and burst.
func bucketWords(l policy.Limit) string {
	burst := l.Burst
	if burst == 0 {
		burst = l.Limit
	}
	return fmt.Sprintf("%d per %s, burst %d", l.Limit, l.Window, burst)
}

// oneCheck is one hit as a front end of this package asks for it.
type oneCheck struct {
	hit   cluster.ValidHit
	start time.Time
	// refuse is the status of a refusal: 429, or what a forward-auth
	// caller asked for.
	refuse int
	// prefix starts a 422's detail; refusedDetail words a refusal.
	prefix        string
	refusedDetail func(h cluster.HitResult, p policy.Policy, known bool, main window.Result, retryMs int64) string
	// header, if set, is a front-end header every decided answer gets
	// (its canonical key and its value).
	headerKey, headerValue string
}

// decideOne runs one hit through the cluster in one call and writes its
// answer: 200, 422 when the cost can never be allowed, or a refusal with
// Retry-After.
func (a *API) decideOne(c *gin.Context, q oneCheck) {
	res, _ := a.results.Get().(*cluster.OneResult)
	if res == nil {
		res = new(cluster.OneResult)
	}
	// Everything below is done with res (its slices) when this returns.
	defer a.results.Put(res)
	err := a.cfg.Node.CheckOne(c.Request.Context(), q.hit, a.cfg.RequestTimeout, res)
	label := unknownLabel
	if res.Known {
		label = q.hit.Hit().Policy
	}
	switch {
	case err != nil:
		a.observeCheck(label, resultFor(err), q.start)
		a.hitError(c, err)
		return
	case res.Known && !res.Policy.IsShadow() && res.Policy.IsConcurrency():
		// Counted with the 422s, as before the lean path.
		a.observeCheck(label, window.CostExceedsLimit.String(), q.start)
		wrongPolicy(c, res.Policy.Name, q.prefix)
		return
	case res.NeverAllowed:
		a.observeCheck(label, window.CostExceedsLimit.String(), q.start)
		neverAllowed(c, res.Policy, res.Beyond, q.hit.Hit().Cost, q.prefix)
		return
	}
	h := res.Hits[0]
	if h.UnknownPolicy {
		a.observeCheck(unknownLabel, CodeUnknownPolicy, q.start)
		unknownPolicy(c, h.Policy)
		return
	}
	result := h.Outcome.String()
	if h.WouldRefuse() {
		result = resultWouldRefuse
		c.Writer.Header()[HeaderShadow] = shadowWouldRefuse
	}
	a.observeCheck(label, result, q.start)
	a.setRateLimitHeaders(c, res.Now, res.ServedBy, h)
	setDecided(c, res.Decided)
	if q.headerKey != "" {
		c.Writer.Header()[q.headerKey] = []string{q.headerValue}
	}
	decided := decidedOf(res.Decided)
	switch {
	case res.Allowed:
		a.answers.writeAllowed(c, h, decided)
	case h.Outcome == window.CostExceedsLimit:
		body := bodyOf(h, false, false)
		body.Decided = decided
		costExceeds(c, h, body)
	default:
		retryMs, _ := retryAfterOf(h)
		c.Writer.Header()["Retry-After"] = []string{strconv.FormatInt(max(1, (retryMs+999)/1000), 10)}
		a.answers.writeRefused(c, q.refuse, h, retryMs, q.refusedDetail(h, res.Policy, res.Known, h.MainPart(), retryMs), decided)
	}
}

// neverAllowed answers 422 without writing to the log: this node's table
// shows that cost exceeds limit i of p (its capacity for a token bucket).
// The log decides everything else, including this same case when the
// table here has not caught up with a new policy.
func neverAllowed(c *gin.Context, p policy.Policy, i int, cost int64, at string) {
	l := p.Limits[i]
	words := fmt.Sprintf("the limit of %d per %s", l.Limit, l.Window)
	if p.Alg() == window.TokenBucket {
		words = fmt.Sprintf("the capacity %d of the bucket (%s)", l.Capacity(), bucketWords(l))
	}
	c.Header("Cache-Control", "no-store")
	c.Render(http.StatusUnprocessableEntity, jsonRender{contentType: problemJSON, v: costProblem{
		problem: problem{Type: "about:blank", Title: http.StatusText(http.StatusUnprocessableEntity), Status: http.StatusUnprocessableEntity,
			Detail: fmt.Sprintf("%scost %d exceeds %s of policy %q: this request can never be allowed, do not retry", at, cost, words, p.Name),
			Code:   CodeCostExceedsLimit},
		Policy: p.Name,
	}})
	c.Abort()
}

// wrongPolicy answers a hit of a concurrency policy: it takes permits, not
// hits.
func wrongPolicy(c *gin.Context, name, at string) {
	writeProblem(c, http.StatusBadRequest, CodeWrongPolicy, fmt.Sprintf("%spolicy: %q is a concurrency policy: take a permit with POST %s; nothing was counted", at, name, PermitsPath))
}

// tableNeverAllows answers 400 for a concurrency policy and 422 for a hit of POST /v1/check whose cost this
// node's table shows can never be allowed (see neverAllowed).
func (a *API) tableNeverAllows(c *gin.Context, name string, cost int64, at string) bool {
	p, ok := a.cfg.Node.Policy(name)
	if !ok || p.IsShadow() {
		return false // a shadow policy answers it allowed, would-refuse
	}
	if p.IsConcurrency() {
		wrongPolicy(c, name, at)
		return true
	}
	i, never := p.NeverAllows(cost)
	if never {
		neverAllowed(c, p, i, cost, at)
	}
	return never
}

// unknownLabel is the metrics label of checks of policies not in the table:
// names clients make up must not grow the metric's label set.
const unknownLabel = "(unknown)"

func (a *API) policyLabel(name string) string {
	if _, ok := a.cfg.Node.Policy(name); ok {
		return name
	}
	return unknownLabel
}

func unknownPolicy(c *gin.Context, name string) {
	writeProblem(c, http.StatusNotFound, CodeUnknownPolicy, fmt.Sprintf("policy %q is not defined (GET /v1/policies lists them); nothing was counted", name))
}

func costExceeds(c *gin.Context, h cluster.HitResult, body wire.CheckBody) {
	m := h.MainPart()
	for _, p := range h.Parts {
		if p.Outcome == window.CostExceedsLimit {
			m = p
			break
		}
	}
	c.Header("Cache-Control", "no-store")
	c.Render(http.StatusUnprocessableEntity, jsonRender{contentType: problemJSON, v: costProblem{
		problem: problem{Type: "about:blank", Title: http.StatusText(http.StatusUnprocessableEntity), Status: http.StatusUnprocessableEntity,
			Detail: fmt.Sprintf("cost %d exceeds the limit of %d per %s: this request can never be allowed, do not retry", h.Cost, m.Limit, policy.Duration(time.Duration(m.WindowMs)*time.Millisecond)),
			Code:   CodeCostExceedsLimit},
		Policy: h.Policy, Limits: body.Limits,
	}})
	c.Abort()
}

// bodyOf shapes one hit's result. counted says whether its group passed;
// retryAfterMs is set when the hit itself was refused.
func bodyOf(h cluster.HitResult, counted, withClient bool) wire.CheckBody {
	m := h.MainPart()
	b := wire.CheckBody{Allowed: counted, Remaining: m.Remaining, ResetAt: m.ResetAt, Limit: m.Limit, WindowMs: m.WindowMs,
		Policy: h.Policy, Limits: make([]wire.LimitBody, len(h.Parts))}
	if withClient {
		b.Client = h.Client
		b.Allowed = h.Outcome == window.Allowed
	}
	retry := int64(0)
	for i, p := range h.Parts {
		lb := wire.LimitBody{Limit: p.Limit, WindowMs: p.WindowMs, Remaining: p.Remaining, ResetAt: p.ResetAt}
		if p.WindowStart != 0 {
			ws := p.WindowStart
			lb.WindowStart = &ws
		}
		b.Limits[i] = lb
		if p.Outcome == window.Refused {
			retry = max(retry, p.RetryAfterMs)
		}
	}
	if h.Outcome == window.Refused {
		b.RetryAfterMs = &retry
	}
	b.WouldRefuse = h.WouldRefuse()
	return b
}

// decidedValues are the X-Rlnode-Decided header's values, made once.
var decidedValues = map[string][]string{cluster.DecidedLocal: {cluster.DecidedLocal}, cluster.DecidedLog: {cluster.DecidedLog}}

func decidedOf(d string) string {
	if d == "" {
		return cluster.DecidedLog
	}
	return d
}

// setDecided says how the check was decided (X-Rlnode-Decided).
func setDecided(c *gin.Context, d string) {
	c.Writer.Header()[cluster.HeaderDecided] = decidedValues[decidedOf(d)]
}

// checkMany is POST /v1/check: several hits in one log entry, all or
// nothing.
func (a *API) checkMany(c *gin.Context) {
	start := time.Now()
	var req wire.CheckManyRequest
	if !bindJSON(c, &req, false) {
		return
	}
	if req.Independent {
		a.checkIndependent(c, &req, start)
		return
	}
	if len(req.Hits) == 0 || len(req.Hits) > cluster.MaxGroup {
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("hits: %d hits, want 1 to %d", len(req.Hits), cluster.MaxGroup))
		return
	}
	hits := make([]cluster.Hit, len(req.Hits))
	for i, h := range req.Hits {
		hits[i] = cluster.Hit{Policy: h.Policy, Client: h.Client, Cost: 1}
		if h.Policy == "" {
			hits[i].Policy = a.cfg.Policy
		}
		if h.Cost != nil {
			hits[i].Cost = *h.Cost
		}
		if err := validHit(hits[i]); err != nil {
			writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("hits[%d].%v", i, err))
			return
		}
	}
	for i, h := range hits {
		if a.tableNeverAllows(c, h.Policy, h.Cost, fmt.Sprintf("hits[%d]: ", i)) {
			a.observeCheck("multi", window.CostExceedsLimit.String(), start)
			return
		}
	}
	ctx, cancel := a.requestContext(c)
	defer cancel()
	res, err := a.cfg.Node.CheckAll(ctx, hits)
	if err != nil {
		a.observeCheck("multi", resultFor(err), start)
		a.hitError(c, err)
		return
	}
	body := wire.CheckManyAnswer{Allowed: res.Allowed, Results: make([]wire.CheckBody, len(res.Hits)), Decided: decidedOf(res.Decided)}
	retry := int64(0)
	for i, h := range res.Hits {
		if h.UnknownPolicy {
			a.observeCheck("multi", CodeUnknownPolicy, start)
			writeProblem(c, http.StatusNotFound, CodeUnknownPolicy, fmt.Sprintf("hits[%d]: policy %q is not defined (GET /v1/policies lists them); nothing was counted", i, h.Policy))
			return
		}
		if h.Outcome == window.CostExceedsLimit {
			a.observeCheck("multi", h.Outcome.String(), start)
			costExceeds(c, h, bodyOf(h, false, true))
			return
		}
		body.Results[i] = bodyOf(h, res.Allowed, true)
		if r := body.Results[i].RetryAfterMs; r != nil {
			retry = max(retry, *r)
		}
		if body.Results[i].WouldRefuse {
			c.Header(HeaderShadow, ShadowWouldRefuse)
		}
	}
	c.Header("Cache-Control", "no-store")
	c.Header(cluster.HeaderServedBy, res.ServedBy)
	setDecided(c, res.Decided)
	status := http.StatusOK
	if !res.Allowed {
		status = http.StatusTooManyRequests
		c.Header("Retry-After", strconv.FormatInt(max(1, (retry+999)/1000), 10))
		a.observeCheck("multi", window.Refused.String(), start)
	} else {
		a.observeCheck("multi", window.Allowed.String(), start)
	}
	c.Render(status, jsonRender{contentType: "application/json; charset=utf-8", v: body})
}

// validHit names the field at fault ("client: ...", "policy: ...").
func validHit(h cluster.Hit) error {
	if err := cluster.ValidateClient(h.Client); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	if err := policy.ValidateName(h.Policy); err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	if h.Cost < 1 || h.Cost > policy.MaxLimit+1 {
		return fmt.Errorf("cost: %d must be from 1 to %d", h.Cost, int64(policy.MaxLimit+1))
	}
	return nil
}

func resultFor(err error) string {
	switch {
	case errors.Is(err, cluster.ErrOutcomeUnknown):
		return "outcome_unknown"
	default:
		return "not_counted"
	}
}

// hitError answers a failed hit (failure.go).
func (a *API) hitError(c *gin.Context, err error) { writeFailure(c, hitFailure(err)) }

// firstLine flattens errors.Join output into one line for a detail string.
func firstLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}

// cause is " (why)" for a failed hit: its cause, without the outcome and
// the reason, which the detail already says in words.
func cause(err error) string {
	var he *cluster.HitError
	switch {
	case !errors.As(err, &he):
		return " (" + firstLine(err) + ")"
	case he.Cause == nil:
		return ""
	}
	return " (" + firstLine(he.Cause) + ")"
}
