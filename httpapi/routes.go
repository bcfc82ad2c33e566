package httpapi

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/rlnode/rlnode/internal/wire"
)

// The public routes that take a path argument or that the command line
// calls; they live here alone (the cluster serves only its node-to-node
// endpoints under cluster.InternalPrefix), but for those the Go client
// calls too, which are internal/wire's.
const (
	PoliciesPath = "/v1/policies"
	JoinPath     = "/v1/cluster/join"
	RemovePath   = "/v1/cluster/remove"
	TransferPath = "/v1/cluster/transfer-leadership"
	BackupPath   = "/v1/cluster/backup"
	RestorePath  = "/v1/cluster/restore"
	// gubernator's HTTP gateway (Config.Gubernator).
	GubernatorRateLimitsPath = "/v1/GetRateLimits"
	GubernatorHealthPath     = "/v1/HealthCheck"
)

// Guard says who may call a route.
//
// There is no node-only guard here: every node-to-node endpoint is the
// cluster's own (cluster.InternalPrefix, served by Node.InternalHandler
// behind one node-certificate-or-token check for the whole prefix), so a
// route added there cannot miss its guard, and no route of this table is
// meant for nodes alone.
type Guard int

const (
	// Public routes answer anyone who reaches the port (under mutual TLS,
	// anyone with a certificate the cluster's CA signed).
	Public Guard = iota
	// Admin routes need the cluster token (Authorization: Bearer) when the
	// node has one.
	Admin
)

func (g Guard) String() string {
	if g == Admin {
		return "admin"
	}
	return "public"
}

// AnyMethod registers a route for every method (forward-auth: the proxy
// asks with the original request's method).
const AnyMethod = "ANY"

// Route is one endpoint of the public API, declared once: the same entry
// registers the gin route, puts its guard in front of it and drives the
// unknown-parameter check (a query parameter the route does not declare is
// a 400 naming it, so ?COST=9 or ?bogus=1 is never silently ignored).
//
// To add an endpoint, add one Route to (*API).routes: its method, its gin
// path, its guard, every query parameter its handler reads, and the
// handler. Nothing else registers routes; TestEveryRouteIsInTheTable fails
// for a route registered on the engine outside the table, and
// TestUnknownQueryParameterIsRefused sends ?bogus=1 to every route.
type Route struct {
	Method string // an http.Method* or AnyMethod
	Path   string // gin's pattern: /v1/policies/:name
	Guard  Guard
	// Query lists the query parameters the handler reads; nil takes none.
	Query []string
	// AnyQuery skips the unknown-parameter check. Only forward-auth sets
	// it: Envoy appends the original request's path and query to it.
	AnyQuery bool
	// MaxBody is the most body bytes the handler reads (bodies.go): 0
	// for a route that reads none, bodyStreamed for one that streams it.
	// A larger body is a 413 naming the cap.
	MaxBody int64
	Handle  gin.HandlerFunc
}

// routes is the public API, every route of it. Gin needs one wildcard name
// per position: :a is the client of /check/:client and the policy of
// /check/:policy/:client.
func (a *API) routes() []Route {
	get, post, put, del := http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete
	stale := []string{"stale"}
	rs := []Route{
		// Checks and reads.
		{Method: get, Path: wire.CheckPath + ":a", Query: []string{"cost"}, Handle: a.checkDefault},
		{Method: get, Path: wire.CheckPath + ":a/:b", Query: []string{"cost"}, Handle: a.checkNamed},
		{Method: get, Path: wire.CheckPath, Query: []string{"cost"}, Handle: a.emptyClient},
		{Method: get, Path: "/check", Query: []string{"cost"}, Handle: a.emptyClient},
		{Method: post, Path: wire.CheckManyPath, MaxBody: MaxBodyItems, Handle: a.checkMany},
		{Method: get, Path: wire.PeekPath + ":a", Query: stale, Handle: a.peekDefault},
		{Method: get, Path: wire.PeekPath + ":a/:b", Query: stale, Handle: a.peekNamed},
		{Method: get, Path: PoliciesPath, Query: stale, Handle: a.listPolicies},
		{Method: get, Path: PoliciesPath + "/:name", Query: stale, Handle: a.getPolicy},
		{Method: post, Path: wire.LeasesPath, MaxBody: MaxBodyCall, Handle: a.lease},
		{Method: post, Path: wire.LeaseReturnPath, MaxBody: MaxBodyCall, Handle: a.leaseReturn},
		{Method: post, Path: PermitsPath, MaxBody: MaxBodyCall, Handle: a.acquirePermit},
		{Method: del, Path: PermitsPath + "/:id", Handle: a.releasePermit},
		{Method: post, Path: PermitsPath + "/:id/renew", MaxBody: MaxBodyCall, Handle: a.renewPermit},
		{Method: post, Path: ReservationsPath, MaxBody: MaxBodyBatch, Handle: a.reserve},
		{Method: post, Path: ReservationsPath + "/:id/settle", MaxBody: MaxBodyCall, Handle: a.settle},
		{Method: AnyMethod, Path: AuthPath + ":policy", AnyQuery: true, Handle: a.auth},
		{Method: AnyMethod, Path: AuthPath + ":policy/*path", AnyQuery: true, Handle: a.auth},

		// Health and the status page.
		{Method: get, Path: "/livez", Handle: a.livez},
		{Method: get, Path: "/healthz", Handle: a.livez},
		{Method: get, Path: "/readyz", Handle: a.readyz},
		{Method: get, Path: "/v1/status", Handle: a.status},
		{Method: get, Path: wire.PeersPath, Handle: a.peers},
		{Method: get, Path: "/ui", Handle: uiRedirect},
		{Method: get, Path: "/ui/", Handle: uiFile("/")},
		{Method: get, Path: "/ui/app.js", Handle: uiFile("/app.js")},
		{Method: get, Path: "/ui/charts.js", Handle: uiFile("/charts.js")},
		{Method: get, Path: "/ui/style.css", Handle: uiFile("/style.css")},

		// Membership, snapshots, backups.
		{Method: post, Path: JoinPath, Guard: Admin, MaxBody: MaxBodyCall, Handle: a.join},
		{Method: post, Path: RemovePath, Guard: Admin, MaxBody: MaxBodyCall, Handle: a.remove},
		{Method: post, Path: TransferPath, Guard: Admin, MaxBody: MaxBodyCall, Handle: a.transfer},
		{Method: post, Path: "/v1/cluster/snapshot", Guard: Admin, MaxBody: MaxBodyCall, Handle: a.snapshot},
		{Method: get, Path: "/v1/cluster/members", Guard: Admin, Handle: a.members},
		{Method: get, Path: RegionPath, Guard: Admin, Handle: a.region},
		{Method: get, Path: BackupPath, Guard: Admin, Handle: a.backup},
		{Method: post, Path: RestorePath, Guard: Admin, Query: []string{"force"}, MaxBody: bodyStreamed, Handle: a.restore},

		// Policies and keys.
		{Method: put, Path: PoliciesPath, Guard: Admin, MaxBody: MaxBodyTable, Handle: a.replacePolicies},
		{Method: put, Path: PoliciesPath + "/:name", Guard: Admin, MaxBody: MaxBodyPolicy, Handle: a.putPolicy},
		{Method: del, Path: PoliciesPath + "/:name", Guard: Admin, Handle: a.deletePolicy},
		{Method: del, Path: wire.WindowsPath + "/:policy/:client", Guard: Admin, Handle: a.resetKey},
		{Method: post, Path: wire.WindowsPath + "/:policy/:client", Guard: Admin, MaxBody: MaxBodyCall, Handle: a.writeCounter},
		{Method: get, Path: "/v1/top", Guard: Admin, Query: []string{"by", "n", "policy", "history"}, Handle: a.top},
	}
	if a.cfg.MetricsHandler != nil {
		rs = append(rs, Route{Method: get, Path: "/metrics", Handle: gin.WrapH(a.cfg.MetricsHandler)})
	}
	if g := a.cfg.Gubernator; g != nil {
		rs = append(rs,
			Route{Method: post, Path: GubernatorRateLimitsPath, MaxBody: MaxBodyItems, Handle: gin.WrapF(g.GetRateLimits)},
			Route{Method: get, Path: GubernatorHealthPath, Handle: gin.WrapF(g.HealthCheck)})
	}
	if a.cfg.DebugEndpoints {
		rs = append(rs,
			Route{Method: get, Path: "/debug/clock-offset", Guard: Admin, Handle: a.getClockOffset},
			Route{Method: post, Path: "/debug/clock-offset", Guard: Admin, MaxBody: MaxBodyCall, Handle: a.setClockOffset})
	}
	return rs
}

// register adds every route to e: the unknown-parameter check first (as
// for a malformed query, the answer names the mistake whoever asks), then
// the guard, then the handler.
func (a *API) register(e *gin.Engine, rs []Route) {
	for _, r := range rs {
		chain := make([]gin.HandlerFunc, 0, 4)
		if !r.AnyQuery {
			chain = append(chain, knownQuery(r.Query))
		}
		if r.Guard == Admin {
			chain = append(chain, a.requireToken)
		}
		if r.MaxBody != 0 {
			chain = append(chain, routeBody(r.MaxBody))
		}
		chain = append(chain, r.Handle)
		if r.Method == AnyMethod {
			e.Any(r.Path, chain...)
		} else {
			e.Handle(r.Method, r.Path, chain...)
		}
	}
}
