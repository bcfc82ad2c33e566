package httpapi

import (
	"errors"
	"net/http"
	"testing"

	"github.com/rlnode/rlnode/cluster"
)

// Every error the node can produce (cluster.Failures: the cluster's
// errors, the reasons of a failed hit, every code of the internal hop and
// its guards' refusals) through every public mapping: no 4xx but the
// caller's own mistakes reaches a public caller for a cluster condition,
// every 503 says when to retry, and a removed node answers 503 not_member.
// A code added to the internal hop (cluster's errorCodes) or a row added
// to unavailableFailures is walked here at once.
func TestClusterFailuresNeverLookLikeTheCallersFault(t *testing.T) {
	mappings := []struct {
		name string
		of   func(error) failure
	}{
		{"hit (check, POST /v1/check, forward-auth, leases)", hitFailure},
		{"admin", func(err error) failure { return adminFailure("remove n2", err) }},
		{"read (peek, policies)", readFailure},
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
