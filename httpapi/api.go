// Package httpapi is rlnode's HTTP surface: the public check API, reads,
// health, the admin API and the internal forwarding endpoint, all on Gin.
package httpapi

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/hashicorp/go-hclog"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/window"
)

// Node is what the HTTP layer needs from the cluster.
type Node interface {
	ID() string
	Policy(name string) (cluster.Policy, bool)
	Check(ctx context.Context, policy, client string, cost int64) (cluster.CheckResult, error)
	Peek(ctx context.Context, policy, client string, stale, forwarded bool) (cluster.PeekResult, error)
	Ready(wait time.Duration) error
	Status() cluster.Status
	Peers() ([]cluster.Peer, error)
	Join(ctx context.Context, j cluster.JoinRequest, forwarded bool) error
	Remove(ctx context.Context, id string, forwarded bool) error
	TransferLeadership(ctx context.Context, id string, forwarded bool) (cluster.TransferResult, error)
	Snapshot() (string, error)
	ServeForward(ctx context.Context, body []byte) ([]byte, error)
	SetClockOffset(d time.Duration)
	ClockOffset() time.Duration
	BootstrapInfo() cluster.BootstrapInfo
	AcceptClaim(c cluster.BootstrapClaim) error
	ClockReading() cluster.ClockReading
	Backup(ctx context.Context, w io.Writer) error
	RestoreBackup(ctx context.Context, r io.Reader, size int64, force bool) error
}

// Config configures the router.
type Config struct {
	Node Node
	// Policy is the policy /check uses.
	Policy string
	// Token, when set, guards the admin and internal endpoints.
	Token string
	// DebugEndpoints enables /debug/clock-offset (testing only).
	DebugEndpoints bool
	// RequestTimeout bounds one check or read.
	RequestTimeout time.Duration
	Logger         hclog.Logger
	// Metrics, when set, records checks and serves /metrics.
	Metrics *Metrics
}

// API is the HTTP handler of one node.
type API struct {
	cfg      Config
	engine   *gin.Engine
	draining atomic.Bool
}

// New builds the router.
func New(cfg Config) *API {
	if cfg.Policy == "" {
		cfg.Policy = "default"
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	// Client ids may contain escaped slashes; match on the raw path and
	// unescape parameters.
	e.UseRawPath = true
	e.UnescapePathValues = true
	e.RedirectTrailingSlash = false
	e.RedirectFixedPath = false
	e.HandleMethodNotAllowed = true
	e.ContextWithFallback = true
	a := &API{cfg: cfg, engine: e}
	e.Use(a.recoverJSON, rejectAmbiguousQuery)
	e.NoRoute(func(c *gin.Context) {
		writeProblem(c, http.StatusNotFound, CodeNotFound, fmt.Sprintf("no endpoint %s %s", c.Request.Method, c.Request.URL.Path))
	})
	e.NoMethod(func(c *gin.Context) {
		writeProblem(c, http.StatusMethodNotAllowed, CodeInvalidRequest, fmt.Sprintf("%s is not allowed on %s", c.Request.Method, c.Request.URL.Path))
	})

	e.GET("/check/:client", a.check)
	e.GET("/check/", a.emptyClient)
	e.GET("/check", a.emptyClient)
	e.GET(cluster.PeekPath+":client", a.peek)
	e.GET("/livez", a.livez)
	e.GET("/healthz", a.livez)
	e.GET("/readyz", a.readyz)
	e.GET("/v1/status", a.status)
	e.GET("/v1/cluster/peers", a.peers)
	if cfg.Metrics != nil {
		e.GET("/metrics", gin.WrapH(cfg.Metrics.Handler()))
	}

	guarded := e.Group("/", a.requireToken)
	guarded.POST(cluster.JoinPath, a.join)
	guarded.POST(cluster.RemovePath, a.remove)
	guarded.POST(cluster.TransferPath, a.transfer)
	guarded.POST("/v1/cluster/snapshot", a.snapshot)
	guarded.POST(cluster.ForwardPath, a.forward)
	guarded.GET(cluster.ClockPath, func(c *gin.Context) { c.JSON(http.StatusOK, a.cfg.Node.ClockReading()) })
	guarded.GET(cluster.BackupPath, a.backup)
	guarded.POST(cluster.RestorePath, a.restore)
	guarded.GET(cluster.BootstrapInfoPath, a.bootstrapInfo)
	guarded.POST(cluster.BootstrapClaimPath, a.acceptClaim)
	if cfg.DebugEndpoints {
		guarded.GET("/debug/clock-offset", a.getClockOffset)
		guarded.POST("/debug/clock-offset", a.setClockOffset)
	}
	return a
}

// Handler returns the http.Handler.
func (a *API) Handler() http.Handler { return a.engine }

// SetDraining makes /readyz fail so load balancers stop sending traffic
// before the server shuts down.
func (a *API) SetDraining() { a.draining.Store(true) }

func (a *API) recoverJSON(c *gin.Context) {
	defer func() {
		if r := recover(); r != nil {
			if r == http.ErrAbortHandler {
				panic(r)
			}
			a.cfg.Logger.Error("handler panic", "path", c.Request.URL.Path, "panic", r)
			writeProblem(c, http.StatusInternalServerError, CodeInternal, "internal error")
		}
	}()
	c.Next()
}

func (a *API) requireToken(c *gin.Context) {
	if a.cfg.Token == "" {
		return
	}
	got, ok := strings.CutPrefix(c.GetHeader("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(a.cfg.Token)) != 1 {
		c.Header("WWW-Authenticate", `Bearer realm="rlnode"`)
		writeProblem(c, http.StatusUnauthorized, CodeUnauthorized, "this endpoint needs the cluster token: Authorization: Bearer <token>")
	}
}

func (a *API) emptyClient(c *gin.Context) {
	writeProblem(c, http.StatusBadRequest, CodeInvalidClient, "client id is empty: use GET /check/{client}")
}

func (a *API) requestContext(c *gin.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.Request.Context(), a.cfg.RequestTimeout)
}

func (a *API) check(c *gin.Context) {
	start := time.Now()
	client := c.Param("client")
	if err := cluster.ValidateClient(client); err != nil {
		writeProblem(c, http.StatusBadRequest, CodeInvalidClient, err.Error())
		return
	}
	pol, ok := a.cfg.Node.Policy(a.cfg.Policy)
	if !ok {
		writeProblem(c, http.StatusInternalServerError, CodeInternal, fmt.Sprintf("policy %q is not configured", a.cfg.Policy))
		return
	}
	cost := int64(1)
	if s, given := c.GetQuery("cost"); given {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 1 {
			writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("cost %q must be a whole number >= 1", s))
			return
		}
		if v > pol.Limit {
			writeProblem(c, http.StatusUnprocessableEntity, CodeCostExceedsLimit,
				fmt.Sprintf("cost %d exceeds the limit of %d per window: this request can never be allowed, do not retry", v, pol.Limit))
			return
		}
		cost = v
	}
	ctx, cancel := a.requestContext(c)
	defer cancel()
	res, err := a.cfg.Node.Check(ctx, a.cfg.Policy, client, cost)
	if err != nil {
		a.cfg.Metrics.observeCheck(a.cfg.Policy, resultFor(err), start)
		a.hitError(c, err)
		return
	}
	d := res.Decision
	a.cfg.Metrics.observeCheck(res.Policy, d.Outcome.String(), start)
	a.setRateLimitHeaders(c, res)
	switch d.Outcome {
	case window.Allowed:
		c.Render(http.StatusOK, jsonRender{contentType: "application/json; charset=utf-8", v: checkBody{
			Allowed: true, Remaining: d.Remaining, ResetAt: d.ResetAt, Limit: res.Limit, WindowMs: res.WindowMs, Policy: res.Policy,
		}})
	case window.Refused:
		retryMs := d.RetryAfterMs(res.Now)
		c.Header("Retry-After", strconv.FormatInt(max(1, (retryMs+999)/1000), 10))
		c.Render(http.StatusTooManyRequests, jsonRender{contentType: problemJSON, v: quotaProblem{
			Type:   "https://iana.org/assignments/http-problem-types#quota-exceeded",
			Title:  "Request quota exceeded",
			Status: http.StatusTooManyRequests,
			Detail: fmt.Sprintf("client %q has used all %d requests of its %s window; it resets in %d ms", client, res.Limit, time.Duration(res.WindowMs)*time.Millisecond, retryMs),
			Code:   CodeQuotaExceeded,
			checkBody: checkBody{Allowed: false, Remaining: d.Remaining, ResetAt: d.ResetAt, Limit: res.Limit, WindowMs: res.WindowMs,
				Policy: res.Policy, RetryAfterMs: &retryMs},
		}})
	default:
		writeProblem(c, http.StatusUnprocessableEntity, CodeCostExceedsLimit,
			fmt.Sprintf("cost %d exceeds the limit of %d per window: this request can never be allowed, do not retry", cost, res.Limit))
	}
}

type checkBody struct {
	Allowed      bool   `json:"allowed"`
	Remaining    int64  `json:"remaining"`
	ResetAt      int64  `json:"resetAt"`
	Limit        int64  `json:"limit"`
	WindowMs     int64  `json:"windowMs"`
	Policy       string `json:"policy"`
	RetryAfterMs *int64 `json:"retryAfterMs,omitempty"`
}

type quotaProblem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
	checkBody
}

// setRateLimitHeaders writes both the IETF draft's structured fields and the
// X-RateLimit-* headers most client libraries read.
func (a *API) setRateLimitHeaders(c *gin.Context, res cluster.CheckResult) {
	d := res.Decision
	h := c.Writer.Header()
	untilReset := max(0, (d.ResetAt-res.Now+999)/1000)
	h.Set("Cache-Control", "no-store")
	h.Set(cluster.HeaderServedBy, res.ServedBy)
	// Built with strconv rather than fmt: this runs on every hit.
	b := make([]byte, 0, 64)
	b = strconv.AppendQuote(b, res.Policy)
	mark := len(b)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, res.Limit, 10)
	b = append(b, ";w="...)
	b = strconv.AppendInt(b, (res.WindowMs+999)/1000, 10)
	h.Set("RateLimit-Policy", string(b))
	b = append(b[:mark], ";r="...)
	b = strconv.AppendInt(b, d.Remaining, 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, untilReset, 10)
	h.Set("RateLimit", string(b))
	h.Set("X-RateLimit-Limit", strconv.FormatInt(res.Limit, 10))
	h.Set("X-RateLimit-Remaining", strconv.FormatInt(d.Remaining, 10))
	h.Set("X-RateLimit-Reset", strconv.FormatInt((d.ResetAt+999)/1000, 10))
}

func resultFor(err error) string {
	switch {
	case errors.Is(err, cluster.ErrOutcomeUnknown):
		return "outcome_unknown"
	default:
		return "not_counted"
	}
}

// hitError answers a failed hit, keeping "not counted" and "unknown" apart.
func (a *API) hitError(c *gin.Context, err error) {
	c.Header("Retry-After", "1")
	switch {
	case errors.Is(err, cluster.ErrOutcomeUnknown):
		writeProblem(c, http.StatusServiceUnavailable, CodeOutcomeUnknown,
			"the outcome of this hit is unknown: it may or may not have counted ("+firstLine(err)+")")
	case errors.Is(err, cluster.ErrNoLeader):
		writeProblem(c, http.StatusServiceUnavailable, CodeNoLeader,
			"the cluster has no leader right now; the hit was not counted ("+firstLine(err)+")")
	default:
		writeProblem(c, http.StatusServiceUnavailable, CodeNotCounted,
			"the hit was not counted ("+firstLine(err)+")")
	}
}

// firstLine flattens errors.Join output into one line for a detail string.
func firstLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}

func (a *API) peek(c *gin.Context) {
	client := c.Param("client")
	if err := cluster.ValidateClient(client); err != nil {
		writeProblem(c, http.StatusBadRequest, CodeInvalidClient, err.Error())
		return
	}
	stale := c.Query("stale") == "true" || c.Query("stale") == "1"
	ctx, cancel := a.requestContext(c)
	defer cancel()
	res, err := a.cfg.Node.Peek(ctx, a.cfg.Policy, client, stale, c.GetHeader(cluster.HeaderForwarded) != "")
	if err != nil {
		code := CodeNotLeader
		if errors.Is(err, cluster.ErrNoLeader) {
			code = CodeNoLeader
		}
		writeProblem(c, http.StatusServiceUnavailable, code, "linearizable read failed: "+firstLine(err))
		return
	}
	c.Header("Cache-Control", "no-store")
	c.Header(cluster.HeaderServedBy, res.ServedBy)
	c.JSON(http.StatusOK, res)
}

func (a *API) livez(c *gin.Context) {
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, gin.H{"status": "ok", "id": a.cfg.Node.ID()})
}

func (a *API) readyz(c *gin.Context) {
	c.Header("Cache-Control", "no-store")
	if a.draining.Load() {
		writeProblem(c, http.StatusServiceUnavailable, CodeNotReady, "node is shutting down")
		return
	}
	if err := a.cfg.Node.Ready(200 * time.Millisecond); err != nil {
		writeProblem(c, http.StatusServiceUnavailable, CodeNotReady, "not ready: "+err.Error())
		return
	}
	c.JSON(http.StatusOK, gin.H{"status": "ready", "id": a.cfg.Node.ID()})
}

func (a *API) status(c *gin.Context) {
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, a.cfg.Node.Status())
}

func (a *API) peers(c *gin.Context) {
	peers, err := a.cfg.Node.Peers()
	if err != nil {
		writeProblem(c, http.StatusServiceUnavailable, CodeInternal, err.Error())
		return
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, peers)
}

// bindJSON decodes a small JSON body strictly, answering 400 itself.
func bindJSON(c *gin.Context, v any, allowEmpty bool) bool {
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, 1<<20)
	body, err := io.ReadAll(c.Request.Body)
	if err != nil {
		writeProblem(c, http.StatusRequestEntityTooLarge, CodeInvalidRequest, "request body too large or unreadable: "+err.Error())
		return false
	}
	if len(strings.TrimSpace(string(body))) == 0 && allowEmpty {
		return true
	}
	if err := decodeStrict(body, v); err != nil {
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, "malformed JSON body: "+err.Error())
		return false
	}
	return true
}

func (a *API) adminError(c *gin.Context, what string, err error) {
	var he *cluster.HTTPError
	switch {
	case errors.As(err, &he) && he.Status < 500:
		writeProblem(c, he.Status, he.Code, withContext(what, he.Detail))
	case errors.Is(err, cluster.ErrUnknownServer):
		writeProblem(c, http.StatusNotFound, CodeNotFound, withContext(what, firstLine(err)))
	case errors.Is(err, cluster.ErrNoLeader):
		writeProblem(c, http.StatusServiceUnavailable, CodeNoLeader, withContext(what, firstLine(err)))
	case errors.Is(err, cluster.ErrNotLeader):
		writeProblem(c, http.StatusServiceUnavailable, CodeNotLeader, withContext(what, firstLine(err)))
	default:
		writeProblem(c, http.StatusInternalServerError, CodeInternal, withContext(what, firstLine(err)))
	}
}

// withContext prefixes detail with what, unless the node (or the leader it
// forwarded to) already said it: "join n4: join n4: ..." helps no one.
func withContext(what, detail string) string {
	if strings.HasPrefix(detail, what+":") {
		return detail
	}
	return what + ": " + detail
}

func forwarded(c *gin.Context) bool { return c.GetHeader(cluster.HeaderForwarded) != "" }

func (a *API) join(c *gin.Context) {
	var j cluster.JoinRequest
	if !bindJSON(c, &j, false) {
		return
	}
	if err := j.Validate(); err != nil {
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, "join: "+firstLine(err))
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), 30*time.Second)
	defer cancel()
	if err := a.cfg.Node.Join(ctx, j, forwarded(c)); err != nil {
		a.adminError(c, "join "+j.ID, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"joined": j.ID})
}

func (a *API) remove(c *gin.Context) {
	var r cluster.RemoveRequest
	if !bindJSON(c, &r, false) {
		return
	}
	if r.ID == "" {
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, "remove: id is required")
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), 30*time.Second)
	defer cancel()
	if err := a.cfg.Node.Remove(ctx, r.ID, forwarded(c)); err != nil {
		a.adminError(c, "remove "+r.ID, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"removed": r.ID})
}

func (a *API) transfer(c *gin.Context) {
	var r cluster.TransferRequest
	if !bindJSON(c, &r, true) {
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), 30*time.Second)
	defer cancel()
	res, err := a.cfg.Node.TransferLeadership(ctx, r.ID, forwarded(c))
	if err != nil {
		a.adminError(c, "transfer leadership", err)
		return
	}
	c.JSON(http.StatusOK, res)
}

func (a *API) snapshot(c *gin.Context) {
	id, err := a.cfg.Node.Snapshot()
	if err != nil {
		a.adminError(c, "snapshot", err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"snapshot": id})
}

func (a *API) forward(c *gin.Context) {
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, 64<<20)
	body, err := io.ReadAll(c.Request.Body)
	if err != nil {
		writeProblem(c, http.StatusRequestEntityTooLarge, CodeInvalidRequest, "forward body: "+err.Error())
		return
	}
	out, err := a.cfg.Node.ServeForward(c.Request.Context(), body)
	if err != nil {
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, firstLine(err))
		return
	}
	a.cfg.Metrics.forwardedIn()
	c.Data(http.StatusOK, "application/octet-stream", out)
}

type clockOffset struct {
	OffsetMs *int64 `json:"offsetMs"`
}

func (a *API) getClockOffset(c *gin.Context) {
	ms := a.cfg.Node.ClockOffset().Milliseconds()
	c.JSON(http.StatusOK, clockOffset{OffsetMs: &ms})
}

func (a *API) setClockOffset(c *gin.Context) {
	var o clockOffset
	if !bindJSON(c, &o, false) {
		return
	}
	if o.OffsetMs == nil {
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, `body must be {"offsetMs": N}`)
		return
	}
	a.cfg.Node.SetClockOffset(time.Duration(*o.OffsetMs) * time.Millisecond)
	a.cfg.Logger.Warn("debug clock offset changed", "offset_ms", *o.OffsetMs)
	a.getClockOffset(c)
}
