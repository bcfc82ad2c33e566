package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/policy"
)

// How the public API answers a request the cluster could not serve. A
// public caller sees a 4xx only for its own mistakes (callerStatuses);
// every cluster condition (no leader, this node removed, the leader
// refusing this node on the internal hop) is a 5xx with Retry-After, so
// proxies that read 401/403 as "deny this user" (nginx auth_request,
// Caddy forward_auth, Traefik ForwardAuth) and load balancers try another
// node instead. failure_test.go walks every error the node can produce
// through every mapping.

// callerStatuses are the 4xx that say the caller asked wrongly: the only
// ones a cluster condition may pass on to a public caller (the leader
// refusing a forwarded request as malformed, unknown, conflicting, too
// large, never allowed or over its limit).
var callerStatuses = map[int]bool{
	http.StatusBadRequest:            true,
	http.StatusNotFound:              true,
	http.StatusConflict:              true,
	http.StatusRequestEntityTooLarge: true,
	http.StatusUnprocessableEntity:   true,
	http.StatusTooManyRequests:       true,
}

// unavailableFailures are cluster conditions every front end answers the
// same way, 503 with Retry-After, before its own rules: the first row
// whose error matches. A new condition that means "ask another node" is a
// new row.
var unavailableFailures = []struct {
	err    error
	code   string
	detail string
}{
	{cluster.ErrNotMember, CodeNotMember, "this node was removed from the cluster; nothing was counted; ask another node"},
	{cluster.ErrParentUnreachable, CodeParentUnreachable, "this region holds no slice of the global budget and its parent lent none in time; nothing was counted; retry, or fail open or closed as for any cluster fault"},
}

// boundFailures are bounds of the caller's own use that the cluster
// keeps the same on every node: 409 with the bound's code from every
// front end, before the rules that read a refusal carried through the
// cluster (a leader's "not counted" or the internal hop's 409) as a
// cluster condition. The first row whose error matches.
var boundFailures = []struct {
	err    error
	code   string
	detail string
}{
	{cluster.ErrTooManyPermits, CodeTooManyPermits, fmt.Sprintf(
		"the cluster holds %d permits across all keys, the most it keeps; release some or wait for their TTLs; no permit was taken", fsm.MaxPermits)},
}

// bound matches err against boundFailures.
func bound(err error) (failure, bool) {
	for _, b := range boundFailures {
		if errors.Is(err, b.err) {
			return failure{http.StatusConflict, b.code, b.detail, false}, true
		}
	}
	return failure{}, false
}

// failure is one answer: status, problem code, detail, and whether it
// carries Retry-After.
type failure struct {
	status int
	code   string
	detail string
	retry  bool
}

func writeFailure(c *gin.Context, f failure) {
	if f.retry {
		c.Header("Retry-After", "1")
	}
	writeProblem(c, f.status, f.code, f.detail)
}

// unavailable matches err against unavailableFailures.
func unavailable(err error) (failure, bool) {
	for _, u := range unavailableFailures {
		if errors.Is(err, u.err) {
			return failure{http.StatusServiceUnavailable, u.code, u.detail + cause(err), true}, true
		}
	}
	return failure{}, false
}

// leaderRefusal is the leader's own 4xx answer to a request this node
// forwarded, if err is one.
func leaderRefusal(err error) (*cluster.HTTPError, bool) {
	var he *cluster.HTTPError
	if errors.As(err, &he) && he.Status >= 400 && he.Status < 500 {
		return he, true
	}
	return nil, false
}

// hitFailure answers a failed hit, grant or return: "not counted" and
// "unknown" kept apart, a definite answer the leader gave a forwarded hit
// passed on when it is the caller's mistake.
func hitFailure(err error) failure {
	if f, ok := unavailable(err); ok {
		return f
	}
	if f, ok := bound(err); ok {
		return f
	}
	if he, ok := leaderRefusal(err); ok && !errors.Is(err, cluster.ErrOutcomeUnknown) {
		if !callerStatuses[he.Status] {
			// The leader refused this node (its credentials, its
			// membership), not the caller's request.
			return failure{http.StatusServiceUnavailable, CodeNotCounted,
				"the leader refused this node's request; nothing was counted; ask another node (" + he.Detail + ")", true}
		}
		code := he.Code
		if code == "" {
			code = CodeInvalidRequest
		}
		return failure{he.Status, code, "the leader refused the request; nothing was counted (" + he.Detail + ")", false}
	}
	switch {
	case errors.Is(err, cluster.ErrOutcomeUnknown):
		return failure{http.StatusServiceUnavailable, CodeOutcomeUnknown,
			"the outcome of this hit is unknown: it may or may not have counted" + cause(err), true}
	case errors.Is(err, cluster.ErrNoLeader):
		return failure{http.StatusServiceUnavailable, CodeNoLeader,
			"the cluster has no leader right now; the hit was not counted" + cause(err), true}
	}
	return failure{http.StatusServiceUnavailable, CodeNotCounted, "the hit was not counted" + cause(err), true}
}

// answerRows is the one table of answers about a request or the
// cluster's state that every call kind gives the same way (admin calls,
// permits, reservations): the first row whose error matches. A cluster
// error a caller can act on gets its row here, never a handler's own
// errors.Is. detail, when set, replaces the error's words.
var answerRows = []struct {
	err    error
	status int
	code   string
	detail string
	retry  bool
}{
	{cluster.ErrClusterUpgrading, http.StatusConflict, CodeClusterUpgrading, "", false},
	{cluster.ErrTableChanged, http.StatusConflict, CodeTableChanged, "", false},
	{cluster.ErrNotFound, http.StatusNotFound, CodeNotFound,
		"no such permit or reservation of yours (never made, released, expired, or taken with another credential)", false},
	{cluster.ErrAlreadySettled, http.StatusConflict, CodeAlreadySettled, "the reservation was settled already; nothing changed", false},
	{cluster.ErrUnknownPolicy, http.StatusNotFound, CodeUnknownPolicy, "", false},
	{cluster.ErrWrongPolicy, http.StatusBadRequest, CodeWrongPolicy, "", false},
	{cluster.ErrBadRequest, http.StatusBadRequest, CodeInvalidRequest, "", false},
	{cluster.ErrNeverFits, http.StatusUnprocessableEntity, CodeCostExceedsLimit, "", false},
	{cluster.ErrCredentialBudget, http.StatusTooManyRequests, CodeCredentialBudget, "", true},
	{cluster.ErrConflict, http.StatusConflict, CodeConflict, "", false},
	{policy.ErrTooManyPolicies, http.StatusConflict, CodeTooManyPolicies, "", false},
	{cluster.ErrUnknownServer, http.StatusNotFound, CodeNotFound, "", false},
	{cluster.ErrNotEmpty, http.StatusConflict, CodeInvalidRequest, "", false},
	{cluster.ErrInvalidBackup, http.StatusBadRequest, CodeInvalidBackup, "", false},
	{cluster.ErrOverLimit, http.StatusUnprocessableEntity, CodeOverLimit, "", false},
	{cluster.ErrNotLeased, http.StatusConflict, CodeNotLeased, "", false},
}

// answered matches err against answerRows; detail is the error's words
// (what the caller sees when the row has none of its own).
func answered(err error, detail string) (failure, bool) {
	for _, r := range answerRows {
		if errors.Is(err, r.err) {
			if r.detail != "" {
				detail = r.detail
			}
			return failure{r.status, r.code, detail, r.retry}, true
		}
	}
	return failure{}, false
}

// requestDetail is what a refused request's error says, without the
// outcome words it travels with: a *cluster.RequestError names the field
// first; a refusal the leader wrote is its detail.
func requestDetail(err error) string {
	var re *cluster.RequestError
	var he *cluster.HTTPError
	var hit *cluster.HitError
	switch {
	case errors.As(err, &re):
		return re.Error()
	case errors.As(err, &he):
		return he.Detail
	case errors.As(err, &hit) && hit.Cause != nil:
		return firstLine(hit.Cause)
	}
	return firstLine(err)
}

// A budget call names what a refused call did not do, for the answer's
// words: a permit or reservation call is not a hit.
const (
	notTaken     = "no permit was taken"
	notReleased  = "the permit was not released"
	notRenewed   = "the permit was not renewed"
	notReserved  = "the reservation was not made"
	notSettled   = "the reservation was not settled"
	settleExpiry = "no live reservation of yours with this id: if it expired (its TTL ended before this settle), the units it reserved stayed charged in full and nothing is given back or charged now; else it was never made or was made with another credential. Settle before the TTL, or reserve with a longer ttl (at most 1h)"
)

// budgetFailure answers a failed permit or reservation call (notDone:
// what the call did not do, one of the constants above): the table, then
// a failed hit's rules (the call never reached the log, or may have).
func budgetFailure(err error, notDone string) failure {
	if f, ok := unavailable(err); ok {
		return f
	}
	if f, ok := bound(err); ok {
		return f
	}
	if f, ok := answered(err, requestDetail(err)+"; nothing was taken"); ok {
		switch {
		case f.code == CodeNotFound && notDone == notSettled:
			f.detail = settleExpiry
		case f.code == CodeClusterUpgrading:
			f.detail = upgradingDetail(err) + "; " + notDone
		}
		return f
	}
	return hitFailure(err)
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

// adminFailure answers a failed admin call (what: the operation, for the
// detail).
func adminFailure(what string, err error) failure {
	if f, ok := unavailable(err); ok {
		f.detail = withContext(what, f.detail)
		return f
	}
	if f, ok := bound(err); ok {
		f.detail = withContext(what, f.detail)
		return f
	}
	detail := withContext(what, detailOf(err))
	if f, ok := answered(err, detail); ok {
		return f
	}
	he, refused := leaderRefusal(err)
	switch {
	case errors.Is(err, cluster.ErrNoLeader):
		return failure{http.StatusServiceUnavailable, CodeNoLeader, detail, true}
	case errors.Is(err, cluster.ErrNotLeader):
		return failure{http.StatusServiceUnavailable, CodeNotLeader, detail, true}
	case refused && callerStatuses[he.Status]:
		// The leader refused a forwarded request as the sender's fault.
		return failure{he.Status, CodeInvalidRequest, detail, false}
	case refused:
		// The leader refused this node, not the caller.
		return failure{http.StatusServiceUnavailable, CodeLeaderRefused, detail, true}
	}
	return failure{http.StatusInternalServerError, CodeInternal, detail, false}
}

// readFailure answers a failed linearizable read (peek, the policy
// table).
func readFailure(err error) failure {
	if f, ok := unavailable(err); ok {
		return f
	}
	if f, ok := answered(err, detailOf(err)); ok {
		return f
	}
	code := CodeNotLeader
	if errors.Is(err, cluster.ErrNoLeader) {
		code = CodeNoLeader
	}
	return failure{http.StatusServiceUnavailable, code, "linearizable read failed: " + firstLine(err), true}
}
