package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/fsm"
)

// written runs a handler's error answer on a recorder and reads back what
// it wrote, for the mappings that write rather than return.
func written(answer func(c *gin.Context)) failure {
	w := httptest.NewRecorder()
	c, _ := gin.CreateTestContext(w)
	answer(c)
	var body struct {
		Code   string `json:"code"`
		Detail string `json:"detail"`
	}
	json.Unmarshal(w.Body.Bytes(), &body)
	return failure{w.Code, body.Code, body.Detail, w.Header().Get("Retry-After") != ""}
}

// Every error the node can produce (cluster.Failures: the cluster's
// errors, the reasons of a failed hit, every code of the internal hop and
// its guards' refusals) through every public mapping: no 4xx but the
// caller's own mistakes reaches a public caller for a cluster condition,
// every 503 says when to retry, and a removed node answers 503 not_member.
// A code added to the internal hop (cluster's errorCodes) or a row added
// to unavailableFailures is walked here at once.
func TestClusterFailuresNeverLookLikeTheCallersFault(t *testing.T) {
	gin.SetMode(gin.ReleaseMode) // as New sets it
	mappings := []struct {
		name string
		of   func(error) failure
	}{
		{"hit (check, POST /v1/check, forward-auth, leases)", hitFailure},
		{"admin", func(err error) failure { return adminFailure("remove n2", err) }},
		{"read (peek, policies)", readFailure},
		{"permits and reservations", func(err error) failure { return budgetFailure(err, notTaken) }},
		{"leases", func(err error) failure {
			return written(func(c *gin.Context) { (&API{}).leaseError(c, "p", err) })
		}},
	}
	for _, err := range cluster.Failures() {
		for _, m := range mappings {
			f := m.of(err)
			switch {
			case f.status < 400:
				t.Errorf("%s: %v answered %d", m.name, err, f.status)
			case f.status < 500 && !callerStatuses[f.status]:
				t.Errorf("%s: %v answered %d %s: a cluster condition dressed as the caller's fault", m.name, err, f.status, f.code)
			case f.status == http.StatusServiceUnavailable && !f.retry:
				t.Errorf("%s: %v answered 503 %s without Retry-After", m.name, err, f.code)
			}
			if errors.Is(err, cluster.ErrNotMember) && (f.status != http.StatusServiceUnavailable || f.code != CodeNotMember) {
				t.Errorf("%s: %v answered %d %s, want 503 %s", m.name, err, f.status, f.code, CodeNotMember)
			}
			if errors.Is(err, cluster.ErrForbidden) && f.status == http.StatusForbidden {
				t.Errorf("%s: the leader's refusal of this node reached the caller as 403", m.name)
			}
		}
	}
}

// TestTooManyPermitsIs409: an acquire the state machine refuses at
// fsm.MaxPermits answers 409 too_many_permits naming the bound, as the
// leader's own error and as a follower decodes the leader's answer on the
// internal hop (every form cluster.Failures lists), from every front end
// but reads (which never take a permit): never a 503 that sends the
// caller to another node, which would refuse it too. (Failed before the
// bound's mapping: the leader's refusal, joined with "not counted",
// answered 503 not_counted.)
func TestTooManyPermitsIs409(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	forms := []error{errors.Join(cluster.ErrNotCounted, fmt.Errorf("%w: %d permits are live", cluster.ErrTooManyPermits, fsm.MaxPermits))}
	for _, err := range cluster.Failures() {
		if errors.Is(err, cluster.ErrTooManyPermits) {
			forms = append(forms, err)
		}
	}
	if len(forms) < 3 {
		t.Fatalf("cluster.Failures has %d forms of too_many_permits, want the bare error, the hop's answer and it refused", len(forms)-1)
	}
	mappings := map[string]func(error) failure{
		"permits": func(err error) failure { return budgetFailure(err, notTaken) },
		"hits":    hitFailure,
		"admin":   func(err error) failure { return adminFailure("acquire", err) },
	}
	for name, of := range mappings {
		for _, err := range forms {
			f := of(err)
			if f.status != http.StatusConflict || f.code != CodeTooManyPermits || f.retry ||
				!strings.Contains(f.detail, strconv.Itoa(fsm.MaxPermits)) {
				t.Errorf("%s: %v answered %d %s %q (Retry-After %v), want 409 %s naming %d",
					name, err, f.status, f.code, f.detail, f.retry, CodeTooManyPermits, fsm.MaxPermits)
			}
		}
	}
}
