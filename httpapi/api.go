// Package httpapi is rlnode's public HTTP surface on Gin: the check API,
// forward-auth, reads, health, the policy and admin API and the metrics
// endpoint. The node-to-node endpoints are the cluster's own
// (cluster.Node.InternalHandler); the binary mounts both.
//
// Every route is one entry of the route table in routes.go (Route): its
// method, path, guard and query parameters, declared once. Adding an
// endpoint is adding an entry there.
package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/hashicorp/go-hclog"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/bearer"
	"github.com/rlnode/rlnode/policy"
)

// The roles the HTTP layer plays against the cluster, each the few calls
// its handlers make. Node is all of them, as *cluster.Node provides.

// Limiter decides hits: the check API and forward-auth.
type Limiter interface {
	Policy(name string) (policy.Policy, bool)
	// CheckOne is the single checks' path (one call per request); the
	// handler lends the result from a pool.
	CheckOne(ctx context.Context, hit cluster.ValidHit, timeout time.Duration, res *cluster.OneResult) error
	CheckAll(ctx context.Context, hits []cluster.Hit) (cluster.CheckResult, error)
}

// Reader reads state without counting.
type Reader interface {
	Peek(ctx context.Context, policy, client string, stale bool) (cluster.PeekResult, error)
	ReadPolicies(ctx context.Context, stale bool) (cluster.PolicyTable, error)
}

// PolicyAdmin changes the policy table and resets keys.
type PolicyAdmin interface {
	SetPolicy(ctx context.Context, p policy.Policy) (string, error)
	ReplacePolicies(ctx context.Context, ps []policy.Policy, ifMatch string) (cluster.TableChange, error)
	DeletePolicy(ctx context.Context, name string) error
	ResetKey(ctx context.Context, policy, client string) (bool, error)
}

// ClusterAdmin changes membership and takes snapshots.
type ClusterAdmin interface {
	Peers() ([]cluster.Peer, error)
	// AuthorizeJoin refuses a join whose caller may not ask for it
	// (under mutual TLS: neither the joining node nor a member).
	AuthorizeJoin(r *http.Request, id string) error
	Join(ctx context.Context, j cluster.JoinRequest) error
	Remove(ctx context.Context, id string) error
	TransferLeadership(ctx context.Context, id string) (cluster.TransferResult, error)
	Snapshot() (string, error)
}

// BackupAdmin backs the state up and restores it (*cluster.Backups).
type BackupAdmin interface {
	Backup(ctx context.Context, w io.Writer) error
	RestoreBackup(ctx context.Context, r io.Reader, size int64, force bool) (cluster.Restored, error)
}

// Health is the node's view of itself for probes and status.
type Health interface {
	ID() string
	Ready(wait time.Duration) error
	Status() cluster.Status
}

// Debug is the test-only clock control.
type Debug interface {
	SetClockOffset(d time.Duration)
	ClockOffset() time.Duration
}

// Node is every role; *cluster.Node implements it.
type Node interface {
	Limiter
	Reader
	PolicyAdmin
	ClusterAdmin
	Health
	Debug
	CounterAdmin
}

var _ Node = (*cluster.Node)(nil)

// Config configures the router.
type Config struct {
	Node Node
	// Budgets serves permits and reservations (default: the node's, when
	// it has them: *cluster.Node.Budgets).
	Budgets Permitter
	// Leases serves the lease API (default: the node's, when it has
	// them: *cluster.Node.Leases).
	Leases Leaser
	// Views serves the members and top-keys endpoints (default: the
	// node's, when it has them: *cluster.Node.Views).
	Views TopView
	// Backups serves backup and restore (default: the node's, when it has
	// them: *cluster.Node.Backups).
	Backups BackupAdmin
	// Policy is the policy /check/:client uses (default: policy.Default).
	Policy string
	// Token, when set, guards the admin and internal endpoints.
	Token string
	// DebugEndpoints enables /debug/clock-offset (testing only).
	DebugEndpoints bool
	// RequestTimeout bounds one check or read.
	RequestTimeout time.Duration
	Logger         hclog.Logger
	// Metrics, when set, records every answered check.
	Metrics Observer
	// MetricsHandler, when set, serves GET /metrics.
	MetricsHandler http.Handler
	// MaxHolderGrants caps the grants one external holder may have
	// outstanding through this node (default DefaultHolderGrants).
	MaxHolderGrants int
	// MaxCredentialGrants caps the grants one credential may have
	// outstanding through this node over all its holder ids (default
	// DefaultCredentialGrants).
	MaxCredentialGrants int
	// LeaseMetrics, when set, records external grants per policy.
	LeaseMetrics LeaseObserver
	// TrustedProxies are the peers whose X-Forwarded-For / X-Real-IP
	// forward-auth believes (key=ip).
	TrustedProxies []netip.Prefix
	// Middleware runs on every request before its handler (tracing, when
	// configured).
	Middleware []gin.HandlerFunc
	// Region names this node's region and Parent its parent's addresses
	// (rlnode serve --region, --parent): global policies are then the
	// parent's to write (region.go).
	Region, Parent string
	// RegionView, on a region's node, serves GET /v1/cluster/region
	// (nil: that route answers 404).
	RegionView RegionViewer
	// Headers chooses the rate-limit headers of a decided check (default
	// HeadersBoth: RateLimit, RateLimit-Policy and X-RateLimit-*).
	Headers HeaderSet
	// Gubernator, when set, serves gubernator's HTTP gateway paths
	// (POST /v1/GetRateLimits, GET /v1/HealthCheck; gubapi.Gateway).
	Gubernator GubernatorGateway
}

// GubernatorGateway is gubernator's HTTP gateway (gubapi.Gateway).
type GubernatorGateway interface {
	GetRateLimits(w http.ResponseWriter, r *http.Request)
	HealthCheck(w http.ResponseWriter, r *http.Request)
}

// API is the HTTP handler of one node.
type API struct {
	cfg      Config
	engine   *gin.Engine
	draining atomic.Bool
	holders  *holderGrants
	answers  *answerBufs
	results  sync.Pool // of *cluster.OneResult
}

// New builds the router.
func New(cfg Config) *API {
	if cfg.Policy == "" {
		cfg.Policy = policy.Default
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.MaxHolderGrants == 0 {
		cfg.MaxHolderGrants = DefaultHolderGrants
	}
	if cfg.MaxCredentialGrants == 0 {
		cfg.MaxCredentialGrants = DefaultCredentialGrants
	}
	if b, ok := cfg.Node.(interface{ Budgets() *cluster.Budgets }); ok && cfg.Budgets == nil {
		cfg.Budgets = b.Budgets()
	}
	if l, ok := cfg.Node.(interface{ Leases() *cluster.Leases }); ok && cfg.Leases == nil {
		cfg.Leases = l.Leases()
	}
	if v, ok := cfg.Node.(interface{ Views() *cluster.Views }); ok && cfg.Views == nil {
		cfg.Views = v.Views()
	}
	if b, ok := cfg.Node.(interface{ Backups() *cluster.Backups }); ok && cfg.Backups == nil {
		cfg.Backups = b.Backups()
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
	a := &API{cfg: cfg, engine: e, holders: newHolderGrants(cfg.MaxHolderGrants, cfg.MaxCredentialGrants), answers: newAnswerBufs()}
	e.Use(a.recoverJSON, rejectAmbiguousQuery)
	e.Use(cfg.Middleware...)
	e.NoRoute(func(c *gin.Context) {
		writeProblem(c, http.StatusNotFound, CodeNotFound, fmt.Sprintf("no endpoint %s %s", c.Request.Method, c.Request.URL.Path))
	})
	e.NoMethod(func(c *gin.Context) {
		writeProblem(c, http.StatusMethodNotAllowed, CodeInvalidRequest, fmt.Sprintf("%s is not allowed on %s", c.Request.Method, c.Request.URL.Path))
	})

	a.register(e, a.routes())
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
	if !bearer.Valid(c.GetHeader("Authorization"), a.cfg.Token) {
		c.Header("WWW-Authenticate", bearer.Challenge)
		writeProblem(c, http.StatusUnauthorized, CodeUnauthorized, "this endpoint needs the cluster token: Authorization: Bearer <token> (the rlnode commands send the one in $RLNODE_CLUSTER_TOKEN_FILE, --cluster-token-file or $RLNODE_CLUSTER_TOKEN)")
	}
}

func (a *API) emptyClient(c *gin.Context) {
	writeProblem(c, http.StatusBadRequest, CodeInvalidClient, "client id is empty: use GET /check/{client}")
}

func (a *API) requestContext(c *gin.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.Request.Context(), a.cfg.RequestTimeout)
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
		bodyReadFailed(c, err)
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
	writeFailure(c, adminFailure(what, err))
}

// detailOf is err for a problem detail: the leader's own words for an
// operation it refused, else err on one line.
func detailOf(err error) string {
	var he *cluster.HTTPError
	if errors.As(err, &he) {
		return he.Detail
	}
	return firstLine(err)
}

// withContext prefixes detail with what, unless the node (or the leader it
// forwarded to) already said it: "join n4: join n4: ..." helps no one.
func withContext(what, detail string) string {
	if strings.HasPrefix(detail, what+":") {
		return detail
	}
	return what + ": " + detail
}

func (a *API) join(c *gin.Context) {
	var j cluster.JoinRequest
	if !bindJSON(c, &j, false) {
		return
	}
	if err := j.Validate(); err != nil {
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, "join: "+firstLine(err))
		return
	}
	if err := a.cfg.Node.AuthorizeJoin(c.Request, j.ID); err != nil {
		writeProblem(c, http.StatusForbidden, "forbidden", err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), 30*time.Second)
	defer cancel()
	if err := a.cfg.Node.Join(ctx, j); err != nil {
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
	if err := a.cfg.Node.Remove(ctx, r.ID); err != nil {
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
	res, err := a.cfg.Node.TransferLeadership(ctx, r.ID)
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
