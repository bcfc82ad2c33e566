package main

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
	"github.com/rlnode/rlnode/internal/testprog"
)

// listServices asks a port's reflection service for its services.
func listServices(ctx context.Context, c *grpc.ClientConn) ([]string, error) {
	st, err := reflectionpb.NewServerReflectionClient(c).ServerReflectionInfo(ctx)
	if err != nil {
		return nil, err
	}
	defer st.CloseSend()
	// A stream the server ended already fails Send with io.EOF; Recv
	// then has its status.
	_ = st.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	r, err := st.Recv()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range r.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return names, nil
}

// Both gRPC ports of the binary answer reflection (behind the cluster
// token, like the rest of the port) and the standard health check
// (without it): a real gRPC client lists the rate limit service on
// --grpc-addr and the quota service on --rlqs-addr, and Check answers
// SERVING; grpcurl, where installed, does the same and calls
// ShouldRateLimit, as docs/proxies/README.md shows.
func TestGRPCReflectionAndHealth(t *testing.T) {
	proctest.Long(t)
	grpcAddr, rlqsAddr := proctest.FreeAddr(t), proctest.FreeAddr(t)
	n := proctest.StartNode(t, rlnodeBin, "n1", "--cluster-token", boundsToken, "--grpc-addr", grpcAddr, "--rlqs-addr", rlqsAddr)
	proctest.WaitReady(t, n, 15*time.Second)
	out, errOut, code := proctest.Run(t, rlnodeBin, []string{"RLNODE_CLUSTER_TOKEN=" + boundsToken},
		"policy", "import-envoy", "--addr", n.URL(), "testdata/envoy-ratelimit.yaml")
	if code != 0 {
		t.Fatalf("import-envoy: exit %d\n%s%s", code, out, errOut)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	withToken := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+boundsToken)
	for _, port := range []struct{ addr, service string }{
		{grpcAddr, rlsv3.RateLimitService_ServiceDesc.ServiceName},
		{rlqsAddr, rlqsv3.RateLimitQuotaService_ServiceDesc.ServiceName},
	} {
		c := quotaConn(t, port.addr)
		if _, err := listServices(ctx, c); grpcstatus.Code(err) != codes.Unauthenticated {
			t.Fatalf("%s: reflection without the token: %v, want UNAUTHENTICATED", port.addr, err)
		}
		names, err := listServices(withToken, c)
		if err != nil {
			t.Fatalf("%s: reflection: %v", port.addr, err)
		}
		if !slices.Contains(names, port.service) || !slices.Contains(names, "grpc.health.v1.Health") {
			t.Fatalf("%s: reflection lists %v; want %s and grpc.health.v1.Health", port.addr, names, port.service)
		}
		for _, svc := range []string{"", port.service} {
			h, err := healthpb.NewHealthClient(c).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
			if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("%s: health %q: %v %v, want SERVING", port.addr, svc, h, err)
			}
		}
	}

	grpcurl := testprog.Need(t, "grpcurl", "go install github.com/fullstorydev/grpcurl/cmd/grpcurl@latest")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, grpcurl, args...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("grpcurl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	auth := "authorization: Bearer " + boundsToken
	if out := run("-plaintext", "-H", auth, grpcAddr, "list"); !strings.Contains(out, "envoy.service.ratelimit.v3.RateLimitService") {
		t.Fatalf("grpcurl list on --grpc-addr:\n%s", out)
	}
	if out := run("-plaintext", "-H", auth, rlqsAddr, "list"); !strings.Contains(out, "envoy.service.rate_limit_quota.v3.RateLimitQuotaService") {
		t.Fatalf("grpcurl list on --rlqs-addr:\n%s", out)
	}
	// grpcurl finds the method through reflection, which wants the token
	// even though the check itself does not.
	for _, addr := range []string{grpcAddr, rlqsAddr} {
		if out := run("-plaintext", "-H", auth, addr, "grpc.health.v1.Health/Check"); !strings.Contains(out, `"SERVING"`) {
			t.Fatalf("grpcurl health check on %s:\n%s", addr, out)
		}
	}
	call := []string{"-plaintext", "-H", auth, "-d", `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]}]}`,
		grpcAddr, "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}
	if out := run(call...); !strings.Contains(out, `"overallCode": "OK"`) {
		t.Fatalf("grpcurl ShouldRateLimit:\n%s", out)
	}
	cmd := exec.CommandContext(ctx, grpcurl, "-plaintext", grpcAddr, "list")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "Unauthenticated") {
		t.Fatalf("grpcurl list without the token: %v\n%s", err, out)
	}
}
