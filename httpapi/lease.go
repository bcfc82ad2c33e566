package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"

	"github.com/gin-gonic/gin"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/credential"
	"github.com/rlnode/rlnode/internal/wire"
	"github.com/rlnode/rlnode/lease"
	"github.com/rlnode/rlnode/policy"
	"github.com/rlnode/rlnode/window"
)

// The lease API lets an application (or any program) hold units of a
// leased policy's budget and decide alone until the grant's deadline.
// Grants go through the log like hits: a follower forwards them to the
// leader.

// Problem codes of the lease API.
const (
	CodeNotLeased     = "not_leased"
	CodeTooManyGrants = "too_many_grants"
)

// DefaultHolderGrants bounds an external holder's outstanding grants
// through one node, DefaultCredentialGrants one credential's over all its
// holder ids (four holders' worth). The lease bounds themselves
// (lease.MaxAppHolderLen, lease.MaxLeaseMs, lease.DefaultLeaseMs) are the
// lease core's, one place for the log, this API, the client and the
// quota service.
const (
	DefaultHolderGrants     = 1024
	DefaultCredentialGrants = 4 * DefaultHolderGrants
)

// Leaser lends budget to external holders (a follower forwards grants and
// returns to the leader): *cluster.Leases.
type Leaser interface {
	Grant(ctx context.Context, req cluster.GrantRequest) (cluster.Grant, error)
	Return(ctx context.Context, req cluster.ReturnRequest) (int64, error)
	// LeaseFor is the lease to ask for a grant usable for usable.
	LeaseFor(bucket bool, usable time.Duration) time.Duration
}

var _ Leaser = (*cluster.Leases)(nil)

// LeaseObserver records external grants per policy (metrics.Metrics
// implements it). result is granted, exhausted (0 units), refused (bad
// input, cap) or failed.
type LeaseObserver interface {
	ObserveLease(policy, result string, units int64)
	ObserveLeaseReturn(policy string, units int64)
}

// leaseBody is a lease or return request; grantAnswer a grant's 200 body
// (units and validForMs always present). Both are lease's declarations,
// which the Go client reads too.
type (
	leaseBody   = lease.Body
	grantAnswer = lease.Answer
)

// holderScope names the credentials a lease request came with, so a
// holder id chosen by one application cannot be used by another: the
// client certificate's fingerprint under mutual TLS, else the bearer
// token's, else "anon" (anyone who knows the id; ids from client.Local
// are random).
func holderScope(r *http.Request) string {
	if name, ok := credential.OfTLS(r.TLS); ok {
		return name
	}
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && tok != "" {
		return credential.Token(tok)
	}
	return "anon"
}

// externalHolder is the holder id the cluster sees: never a node's id.
func externalHolder(r *http.Request, holder string) string {
	return "app:" + holderScope(r) + ":" + holder
}

func validHolder(h string) error {
	if h == "" {
		return errors.New("holder is empty: name this application instance (client.Local picks a random id)")
	}
	if len(h) > lease.MaxAppHolderLen {
		return fmt.Errorf("holder is %d bytes; at most %d", len(h), lease.MaxAppHolderLen)
	}
	for _, r := range h {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return fmt.Errorf("holder %q: printable characters without spaces only", h)
		}
	}
	return nil
}

// leasedPolicy answers 404 or 409 itself unless name is a leased policy.
func (a *API) leasedPolicy(c *gin.Context, name string) (policy.Policy, bool) {
	if err := policy.ValidateName(name); err != nil {
		writeProblem(c, http.StatusNotFound, CodeUnknownPolicy, "policy "+err.Error())
		return policy.Policy{}, false
	}
	p, found, ok := a.findPolicy(c, name)
	if !ok {
		return p, false
	}
	if !found {
		writeProblem(c, http.StatusNotFound, CodeUnknownPolicy, fmt.Sprintf("policy %q is not defined (GET /v1/policies lists them); nothing was granted", name))
		return p, false
	}
	if !p.IsLeased() {
		writeProblem(c, http.StatusConflict, CodeNotLeased, notLeasedDetail(p))
		return p, false
	}
	return p, true
}

// notLeasedDetail says why p grants no leases and what to do instead,
// suggesting consistency: leased only where the policy could take it.
func notLeasedDetail(p policy.Policy) string {
	switch {
	case p.IsConcurrency():
		return fmt.Sprintf("policy %q is a concurrency policy: it counts permits in flight, not hits, and grants no leases; take a permit with POST /v1/permits (rlnode permit acquire); nothing was granted", p.Name)
	case p.CalendarAligned(), p.IsShadow():
		return fmt.Sprintf("policy %q is strict: every hit goes through the log, so it grants no leases (a calendar or shadow policy cannot be leased); use GET /check; nothing was granted", p.Name)
	}
	return fmt.Sprintf("policy %q is strict: every hit goes through the log, so it grants no leases (set consistency: leased to allow them); use GET /check; nothing was granted", p.Name)
}

// findPolicy looks name up in this node's table and, when the table
// lacks it, in the leader's (a linearizable read): a node that has just
// restarted, or lags, may not have applied the entry that defined it yet,
// and 404 would tell the caller the policy does not exist. The lease,
// permit and reservation APIs all ask through it. found is false when no
// table has the policy; ok is false when the leader could not be read
// (then the request is answered here).
func (a *API) findPolicy(c *gin.Context, name string) (p policy.Policy, found, ok bool) {
	if p, found := a.cfg.Node.Policy(name); found {
		return p, true, true
	}
	ctx, cancel := a.requestContext(c)
	defer cancel()
	t, err := a.cfg.Node.ReadPolicies(ctx, false)
	if err != nil {
		a.hitError(c, errors.Join(cluster.ErrNotCounted, fmt.Errorf("read the policy table on the leader: %w", err)))
		return policy.Policy{}, false, false
	}
	for _, p := range t.Policies {
		if p.Name == name {
			return p, true, true
		}
	}
	return policy.Policy{}, false, true
}

// bindLease reads a lease or return body (the policy defaulting to the
// node's default) and says what is wrong with its client or holder, if
// anything; ok is false when the body was already answered as malformed.
func (a *API) bindLease(c *gin.Context) (in leaseBody, bad string, ok bool) {
	if !bindJSON(c, &in, false) {
		return in, "", false
	}
	if in.Policy == "" {
		in.Policy = a.cfg.Policy
	}
	if err := cluster.ValidateClient(in.Client); err != nil {
		return in, "client: " + err.Error(), true
	}
	if err := validHolder(in.Holder); err != nil {
		return in, err.Error(), true
	}
	return in, "", true
}

// lease is POST /v1/leases: acquire (or, asked again, extend) a grant.
func (a *API) lease(c *gin.Context) {
	in, bad, ok := a.bindLease(c)
	if !ok {
		return
	}
	switch {
	case bad != "":
	case in.Want < 1 || in.Want > policy.MaxLimit:
		bad = fmt.Sprintf("want %d: ask for 1 to %d units", in.Want, int64(policy.MaxLimit))
	case in.LeaseMs < 0 || in.LeaseMs > lease.MaxLeaseMs:
		bad = fmt.Sprintf("leaseMs %d: 1 to %d (0: %d)", in.LeaseMs, lease.MaxLeaseMs, lease.DefaultLeaseMs)
	case in.Grant != 0 || in.Units != 0:
		bad = "a lease request names no grant and no units (POST " + wire.LeaseReturnPath + " returns units)"
	}
	if bad != "" {
		a.observeLease(in.Policy, "refused", 0)
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, bad+"; nothing was granted")
		return
	}
	p, ok := a.leasedPolicy(c, in.Policy)
	if !ok {
		a.observeLease(a.policyLabel(in.Policy), "refused", 0)
		return
	}
	holder := externalHolder(c.Request, in.Holder)
	release, err := a.holders.reserve(owner(c.Request), holder)
	if err != nil {
		a.observeLease(in.Policy, "refused", 0)
		if errors.Is(err, errCredentialGrants) {
			c.Header("Retry-After", "1")
			writeProblem(c, http.StatusTooManyRequests, CodeCredentialBudget, err.Error()+"; nothing was granted")
			return
		}
		writeProblem(c, http.StatusConflict, CodeTooManyGrants, err.Error()+"; nothing was granted")
		return
	}
	if in.LeaseMs == 0 {
		in.LeaseMs = lease.DefaultLeaseMs
	}
	ctx, cancel := a.requestContext(c)
	defer cancel()
	g, err := a.cfg.Leases.Grant(ctx, cluster.GrantRequest{Policy: in.Policy, Client: in.Client, Holder: holder, Want: in.Want,
		Lease: a.cfg.Leases.LeaseFor(p.Alg() == window.TokenBucket, time.Duration(in.LeaseMs)*time.Millisecond)})
	release(g)
	if err != nil {
		a.observeLease(in.Policy, "failed", 0)
		a.leaseError(c, in.Policy, err)
		return
	}
	result := "granted"
	if g.Units == 0 {
		result = "exhausted"
	}
	a.observeLease(in.Policy, result, g.Units)
	c.Header("Cache-Control", "no-store")
	ans := grantAnswer{Policy: in.Policy, Client: in.Client, Holder: in.Holder, Grant: g.ID, Units: g.Units,
		WindowStart: g.WindowStart, ResetAt: g.ResetAt, ValidForMs: max(0, g.UsableFor).Milliseconds()}
	for _, p := range g.Parts {
		// The most constraining limit is the part the grant's window
		// came from.
		if p.ResetAt == g.ResetAt && p.WindowStart == g.WindowStart {
			ans.Limit, ans.WindowMs = p.Limit, p.WindowMs
			break
		}
	}
	if g.Units < in.Want {
		ans.RetryAfterMs = max(1, g.ResetAt-g.Now)
	}
	c.Render(http.StatusOK, jsonRender{contentType: "application/json; charset=utf-8", v: ans})
}

// leaseReturn is POST /v1/leases/return: give back unspent units of one
// of the caller's own grants.
func (a *API) leaseReturn(c *gin.Context) {
	in, bad, ok := a.bindLease(c)
	if !ok {
		return
	}
	switch {
	case bad != "":
	case in.Grant == 0:
		bad = "grant is missing: name the grant (its id from POST " + wire.LeasesPath + ")"
	case in.Units < 1 || in.Units > policy.MaxLimit:
		bad = fmt.Sprintf("units %d: return 1 to %d units", in.Units, int64(policy.MaxLimit))
	case in.Want != 0 || in.LeaseMs != 0:
		bad = "a return takes no want or leaseMs"
	}
	if bad != "" {
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, bad+"; nothing was returned")
		return
	}
	if _, ok := a.leasedPolicy(c, in.Policy); !ok {
		return
	}
	holder := externalHolder(c.Request, in.Holder)
	ctx, cancel := a.requestContext(c)
	defer cancel()
	got, err := a.cfg.Leases.Return(ctx, cluster.ReturnRequest{Policy: in.Policy, Client: in.Client, Holder: holder, ID: in.Grant, Units: in.Units})
	if err != nil {
		a.leaseError(c, in.Policy, err)
		return
	}
	a.holders.forget(owner(c.Request), holder, in.Grant)
	if a.cfg.LeaseMetrics != nil {
		a.cfg.LeaseMetrics.ObserveLeaseReturn(in.Policy, got)
	}
	// returned may be less than asked: a grant that expired, of a window
	// that ended, or of a key reset since keeps its units spent.
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, gin.H{"returned": got})
}

// leaseError answers a grant or return that failed: the policy changed
// under the request, or no decision was made.
func (a *API) leaseError(c *gin.Context, name string, err error) {
	if f, ok := answered(err, fmt.Sprintf("policy %q: %s; nothing was granted or returned", name, detailOf(err))); ok {
		writeFailure(c, f)
		return
	}
	a.hitError(c, err)
}

func (a *API) observeLease(policyName, result string, units int64) {
	if a.cfg.LeaseMetrics != nil {
		a.cfg.LeaseMetrics.ObserveLease(a.policyLabel(policyName), result, units)
	}
}
