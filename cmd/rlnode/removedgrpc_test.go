package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
	"github.com/rlnode/rlnode/rlqs/rlqstest"
)

// Issue 35 item 8: a removed node can decide nothing, so its gRPC front
// ends answer UNAVAILABLE to every call, whatever the policy (Envoy then
// asks another host or applies its failure mode), as its HTTP API
// answers 503 not_member. Before, its rate limit service answered OK with
// no limit for a descriptor of a policy added after the removal (its
// table never learnt it), and its quota service kept such a stream open
// with no assignment.
func TestRemovedNodesGRPCAnswersUnavailable(t *testing.T) {
	proctest.Long(t)
	const tok = "removed-grpc-token-0123456789"
	n1 := proctest.StartNode(t, rlnodeBin, "n1", "--cluster-token", tok)
	proctest.WaitReady(t, n1, 15*time.Second)
	n2 := proctest.StartNode(t, rlnodeBin, "n2", "--cluster-token", tok, "--join", n1.URL())
	grpcAddr, rlqsAddr := proctest.FreeAddr(t), proctest.FreeAddr(t)
	n3 := proctest.StartNode(t, rlnodeBin, "n3", "--cluster-token", tok, "--join", n1.URL(), "--grpc-addr", grpcAddr, "--rlqs-addr", rlqsAddr)
	for _, n := range []*proctest.Node{n2, n3} {
		proctest.WaitReady(t, n, 30*time.Second)
	}
	proctest.WaitVoters(t, n1, 3, 30*time.Second)

	removeNode(t, n1, tok, "n3")
	readyzFails(t, n3, 5*time.Second)
	// A policy added after the removal: the removed node never learns it.
	body := map[string]any{"name": "late", "algorithm": "fixed_window", "consistency": "leased",
		"limits": []map[string]any{{"limit": 5, "window": "1h"}}}
	if r, err := n1.Do("PUT", "/v1/policies/late", tok, body); err != nil || (r.Status != 200 && r.Status != 201) {
		t.Fatalf("PUT policy: %v %d %s", err, r.Status, r.Raw)
	}

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rlsClient := rlsv3.NewRateLimitServiceClient(conn)
	for _, d := range []struct{ domain, key, value string }{
		{"late", "tenant", "acme"},            // the policy added after the removal
		{"edge", "remote_address", "1.2.3.4"}, // no policy at all
	} {
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok), 10*time.Second)
		resp, err := rlsClient.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: d.domain, Descriptors: []*commonv3.RateLimitDescriptor{desc(d.key, d.value)}})
		cancel()
		if grpcstatus.Code(err) != codes.Unavailable || !strings.Contains(grpcstatus.Convert(err).Message(), "removed") {
			t.Errorf("rate limit service of the removed node, domain %s: %v %v; want UNAVAILABLE naming the removal", d.domain, resp, err)
		}
	}

	envoy, err := rlqstest.Start(rlqstest.Config{Addr: rlqsAddr, Domain: "late", Interval: 100 * time.Millisecond, Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	defer envoy.Close()
	envoy.Allow(map[string]string{"tenant": "acme"})
	proctest.Poll(t, 10*time.Second, func() error {
		err := envoy.Ended()
		if grpcstatus.Code(err) != codes.Unavailable {
			return fmt.Errorf("quota stream of the removed node: ended with %v, want UNAVAILABLE", err)
		}
		return nil
	})
}
