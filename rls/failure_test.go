package rls

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rlnode/rlnode/cluster"
)

// Every way the cluster can fail a check is UNAVAILABLE to Envoy, never a
// code that reads as the caller's fault (PERMISSION_DENIED for a leader
// refusing a removed node); a removed node says to ask another node.
func TestShouldRateLimitEveryClusterFailureIsUnavailable(t *testing.T) {
	for _, cerr := range cluster.Failures() {
		f := &fakeLimiter{policies: envoyPolicies(t, webConfig), decide: func([]cluster.Hit) (cluster.CheckResult, error) { return cluster.CheckResult{}, cerr }}
		_, err := New(Config{Limiter: f}).ShouldRateLimit(context.Background(), request("bob"))
		st, _ := status.FromError(err)
		if st.Code() != codes.Unavailable {
			t.Errorf("%v: %v, want UNAVAILABLE", cerr, err)
		}
		if errors.Is(cerr, cluster.ErrNotMember) && !strings.Contains(st.Message(), "removed from the cluster") {
			t.Errorf("%v: message %q does not say this node was removed", cerr, st.Message())
		}
	}
}
