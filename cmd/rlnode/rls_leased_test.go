package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// An envoyproxy/ratelimit config imported with --consistency leased is
// answered from the nodes' leases: a hot descriptor's ShouldRateLimit is
// decided by the node Envoy asked, with no log entry
// (rlnode_lease_local_decisions_total counts it), and the cluster never
// allows more than the limit. (Failed before --consistency existed: the
// import made strict policies and no decision was local.)
func TestLeasedEnvoyConfigAnswersFromLeases(t *testing.T) {
	nodes, grpcAddr := rlsNodes(t)
	file := filepath.Join(t.TempDir(), "hot.yaml")
	conf := "domain: hot\ndescriptors:\n  - key: api\n    rate_limit:\n      unit: hour\n      requests_per_unit: 100\n"
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := proctest.Run(t, rlnodeBin, []string{"RLNODE_CLUSTER_TOKEN=" + rlsToken},
		"policy", "import-envoy", "--anchored", "--consistency", "leased", "--addr", nodes[0].URL(), file)
	if code != 0 || !strings.Contains(out, "added envoy:hot.api") {
		t.Fatalf("import-envoy --consistency leased: exit %d\n%s%s", code, out, errOut)
	}
	rig := rlsDial(t, nodes, grpcAddr)
	proctest.Poll(t, 10*time.Second, func() error {
		r := proctest.MustGet(t, rig.urls["follower"]+"/v1/policies")
		if !strings.Contains(string(r.Raw), `"consistency":"leased"`) {
			return fmt.Errorf("the follower's policies: %s", r.Raw)
		}
		return nil
	})
	c := rig.clients["follower"]
	// The follower's rate limit service matches the descriptor once its
	// tree has the new policies (a look with hits_addend 0 counts nothing).
	proctest.Poll(t, 10*time.Second, func() error {
		look := desc("api", "tenant-1")
		look.HitsAddend = wrapperspb.UInt64(0)
		ctx, cancel := context.WithTimeout(authed(), 5*time.Second)
		defer cancel()
		resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "hot", Descriptors: []*commonv3.RateLimitDescriptor{look}})
		if err != nil || len(resp.GetStatuses()) != 1 || resp.GetStatuses()[0].GetCurrentLimit() == nil {
			return fmt.Errorf("the follower does not match the descriptor yet: %v %v", resp, err)
		}
		return nil
	})
	allowed := 0
	for i := range 300 {
		ctx, cancel := context.WithTimeout(authed(), 10*time.Second)
		resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "hot",
			Descriptors: []*commonv3.RateLimitDescriptor{desc("api", "tenant-1")}})
		cancel()
		if err != nil {
			t.Fatalf("hit %d: %v", i, err)
		}
		if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
			allowed++
		}
	}
	if allowed > 100 {
		t.Fatalf("%d allowed of a limit of 100", allowed)
	}
	local := leaseMetric(t, rig.urls["follower"], "rlnode_lease_local_decisions_total")
	t.Logf("%d allowed of 100 (300 asked of a follower), %d decided from the follower's leases", allowed, local)
	if local < 50 {
		t.Fatalf("%d hits decided from leases, want most of the allowed ones", local)
	}
}

// leaseMetric sums a metric's samples on a node's /metrics.
func leaseMetric(t *testing.T, base, name string) int64 {
	t.Helper()
	r := proctest.MustGet(t, base+"/metrics")
	var sum int64
	for _, line := range strings.Split(string(r.Raw), "\n") {
		if !strings.HasPrefix(line, name) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += int64(v)
		}
	}
	return sum
}
