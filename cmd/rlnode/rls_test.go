package main

import (
	"sync"

	"context"
	"errors"
	"fmt"
	"github.com/rlnode/rlnode/policy"
	"github.com/rlnode/rlnode/rls"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

const rlsToken = "rls-test-token"

// rlsRig is a three-node cluster serving gRPC, with clients of a
// follower's and the leader's gRPC ports and their HTTP URLs.
type rlsRig struct {
	clients map[string]rlsv3.RateLimitServiceClient
	conns   map[string]*grpc.ClientConn
	urls    map[string]string
}

// rlsConnect starts three nodes serving gRPC with a cluster token, imports
// the test's envoyproxy/ratelimit configuration (anchored windows, so a
// minute boundary cannot land between two hits of a test) and connects to
// a follower's and the leader's gRPC ports.
func rlsConnect(t *testing.T) rlsRig {
	t.Helper()
	nodes, grpcAddr := rlsNodes(t)
	out, errOut, code := proctest.Run(t, rlnodeBin, []string{"RLNODE_CLUSTER_TOKEN=" + rlsToken},
		"policy", "import-envoy", "--anchored", "--addr", nodes[1].URL(), "testdata/envoy-ratelimit.yaml")
	if code != 0 || !strings.Contains(out, "added envoy:edge.remote_address") {
		t.Fatalf("import-envoy: exit %d\n%s%s", code, out, errOut)
	}
	// Importing again changes nothing, on every node once it has applied
	// the first import.
	for _, n := range nodes {
		proctest.Poll(t, 10*time.Second, func() error {
			out, errOut, code := proctest.Run(t, rlnodeBin, []string{"RLNODE_CLUSTER_TOKEN=" + rlsToken},
				"policy", "import-envoy", "--anchored", "--dry-run", "--addr", n.URL(), "testdata/envoy-ratelimit.yaml")
			if code != 0 || !strings.Contains(out, "no changes") {
				return fmt.Errorf("second import-envoy via %s: exit %d\n%s%s", n.ID, code, out, errOut)
			}
			// The rate limit service matches descriptors against the
			// node's own table, and the import's dry run reads the
			// leader's: wait until this node has applied the import too.
			r, err := proctest.Get(n.URL() + "/v1/policies/envoy:edge.tenant.plan_free?stale=true")
			if err != nil || r.Status != 200 {
				return fmt.Errorf("%s has not applied the import: %v %d %s", n.ID, err, r.Status, r.Raw)
			}
			return nil
		})
	}
	return rlsDial(t, nodes, grpcAddr)
}

// rlsNodes starts three nodes serving gRPC with the cluster token (and
// extra flags) and returns them with their gRPC addresses by id.
func rlsNodes(t *testing.T, extra ...string) ([]*proctest.Node, map[string]string) {
	t.Helper()
	grpcAddr := map[string]string{}
	var nodes []*proctest.Node
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("n%d", i)
		grpcAddr[id] = proctest.FreeAddr(t)
		args := append([]string{"--grpc-addr", grpcAddr[id], "--cluster-token", rlsToken}, extra...)
		if i > 1 {
			args = append(args, "--join", nodes[0].URL())
		}
		nodes = append(nodes, proctest.StartNode(t, rlnodeBin, id, args...))
		proctest.WaitReady(t, nodes[i-1], 15*time.Second)
	}
	// Settled, as proctest.StartCluster leaves it: the joined nodes'
	// promotions are log entries a test counting entries must not meet.
	proctest.WaitVoters(t, nodes[0], 3, 30*time.Second)
	return nodes, grpcAddr
}

// rlsDial connects to a follower's and the leader's gRPC ports.
func rlsDial(t *testing.T, nodes []*proctest.Node, grpcAddr map[string]string) rlsRig {
	t.Helper()
	leader := leaderOf(t, nodes)
	follower := nodes[0]
	if follower == leader {
		follower = nodes[1]
	}
	r := rlsRig{clients: map[string]rlsv3.RateLimitServiceClient{}, conns: map[string]*grpc.ClientConn{}, urls: map[string]string{}}
	for role, n := range map[string]*proctest.Node{"leader": leader, "follower": follower} {
		conn, err := grpc.NewClient(grpcAddr[n.ID], grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		r.clients[role], r.conns[role], r.urls[role] = rlsv3.NewRateLimitServiceClient(conn), conn, n.URL()
	}
	return r
}

func authed() context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+rlsToken)
}

func desc(kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func ask(t *testing.T, c rlsv3.RateLimitServiceClient, hits uint32, ds ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(authed(), 10*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

func header(resp *rlsv3.RateLimitResponse, name string) string {
	for _, h := range resp.GetResponseHeadersToAdd() {
		if strings.EqualFold(h.GetKey(), name) {
			return h.GetValue()
		}
	}
	return ""
}

func TestEnvoyRateLimitService(t *testing.T) {
	rig := rlsConnect(t)
	c, conn := rig.clients["follower"], rig.conns["follower"]
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT

	hc := healthpb.NewHealthClient(conn)
	if h, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", h, err)
	}
	if _, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("remote_address", "x")}}); grpcstatus.Code(err) != codes.Unauthenticated {
		t.Fatalf("without the token: %v", err)
	}

	t.Run("value-less key: one bucket per value", func(t *testing.T) {
		for want := uint32(2); ; want-- {
			r := ask(t, c, 0, desc("remote_address", "10.0.0.1"))
			st := r.GetStatuses()[0]
			if r.GetOverallCode() != ok || st.GetLimitRemaining() != want || st.GetCurrentLimit().GetRequestsPerUnit() != 3 ||
				st.GetCurrentLimit().GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || st.GetDurationUntilReset().AsDuration() <= 0 {
				t.Fatalf("hit with %d left: %v", want, r)
			}
			if header(r, "ratelimit-policy") != `"envoy:edge.remote_address";q=3;w=60` || !strings.Contains(header(r, "ratelimit"), ";r=") {
				t.Fatalf("headers %v", r.GetResponseHeadersToAdd())
			}
			if want == 0 {
				break
			}
		}
		r := ask(t, c, 0, desc("remote_address", "10.0.0.1"))
		if r.GetOverallCode() != over || r.GetStatuses()[0].GetCode() != over || header(r, "retry-after") == "" {
			t.Fatalf("fourth hit: %v", r)
		}
		if r := ask(t, c, 0, desc("remote_address", "10.0.0.2")); r.GetOverallCode() != ok || r.GetStatuses()[0].GetLimitRemaining() != 2 {
			t.Fatalf("another address: %v", r)
		}
	})

	t.Run("nested, most specific match, unlimited, no match", func(t *testing.T) {
		for i := 0; i < 2; i++ {
			if r := ask(t, c, 0, desc("tenant", "acme", "plan", "free")); r.GetOverallCode() != ok {
				t.Fatalf("free hit %d: %v", i, r)
			}
		}
		if r := ask(t, c, 0, desc("tenant", "acme", "plan", "free")); r.GetOverallCode() != over {
			t.Fatalf("free over: %v", r)
		}
		for i := 0; i < 5; i++ {
			r := ask(t, c, 0, desc("tenant", "acme", "plan", "internal"))
			if r.GetOverallCode() != ok || r.GetStatuses()[0].GetLimitRemaining() != math.MaxUint32 {
				t.Fatalf("unlimited: %v", r)
			}
		}
		// The parent alone has no limit; an unknown domain neither.
		if r := ask(t, c, 0, desc("tenant", "acme")); r.GetOverallCode() != ok || r.GetStatuses()[0].GetCurrentLimit() != nil {
			t.Fatalf("tenant alone: %v", r)
		}
	})

	t.Run("shadow mode counts but never refuses", func(t *testing.T) {
		r := ask(t, c, 0, desc("tenant", "acme", "plan", "pro"))
		if r.GetOverallCode() != ok || r.GetStatuses()[0].GetLimitRemaining() != 0 {
			t.Fatalf("first shadow hit: %v", r)
		}
		r = ask(t, c, 0, desc("tenant", "acme", "plan", "pro"), desc("remote_address", "10.0.0.9"))
		if r.GetOverallCode() != ok || r.GetStatuses()[0].GetCode() != ok || r.GetStatuses()[1].GetLimitRemaining() != 2 {
			t.Fatalf("shadow over its limit: %v", r)
		}
	})

	t.Run("several descriptors: all or nothing", func(t *testing.T) {
		r := ask(t, c, 0, desc("remote_address", "10.0.0.3"), desc("path", "/login"))
		if r.GetOverallCode() != ok || r.GetStatuses()[1].GetCurrentLimit().GetName() != "login" {
			t.Fatalf("first: %v", r)
		}
		r = ask(t, c, 0, desc("remote_address", "10.0.0.3"), desc("path", "/login"))
		if r.GetOverallCode() != over || r.GetStatuses()[0].GetCode() != ok || r.GetStatuses()[1].GetCode() != over {
			t.Fatalf("second: %v", r)
		}
		// The refused request spent nothing on the address: one of three
		// used, so a hit now leaves one.
		if r := ask(t, c, 0, desc("remote_address", "10.0.0.3")); r.GetStatuses()[0].GetLimitRemaining() != 1 {
			t.Fatalf("address after a refused request: %v", r)
		}
	})

	t.Run("hits_addend and limit override", func(t *testing.T) {
		if r := ask(t, c, 2, desc("remote_address", "10.0.0.4")); r.GetStatuses()[0].GetLimitRemaining() != 1 {
			t.Fatalf("hits_addend 2: %v", r)
		}
		d := desc("remote_address", "10.0.0.5")
		d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}
		if r := ask(t, c, 0, d); r.GetOverallCode() != ok {
			t.Fatalf("override first: %v", r)
		}
		if r := ask(t, c, 0, d); r.GetOverallCode() != over || r.GetStatuses()[0].GetCurrentLimit().GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR {
			t.Fatalf("override second: %v", r)
		}
	})

	t.Run("limit overrides stop at the cap under concurrency", func(t *testing.T) {
		var wg sync.WaitGroup
		for i := range rls.MaxOverridePolicies + 100 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := desc("remote_address", "10.0.9.9")
				d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(1000 + i), Unit: typev3.RateLimitUnit_DAY}
				c.ShouldRateLimit(authed(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{d}})
			}()
		}
		wg.Wait()
		r := proctest.MustGet(t, rig.urls["leader"]+"/v1/policies")
		if n := strings.Count(string(r.Raw), `"name":"`+policy.EnvoyOverridePrefix); n > rls.MaxOverridePolicies {
			t.Fatalf("%d override policies after %d concurrent distinct overrides; the cap is %d", n, rls.MaxOverridePolicies+100, rls.MaxOverridePolicies)
		}
	})

	t.Run("policy apply leaves imported policies alone", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "policies.yaml")
		if err := os.WriteFile(file, []byte("policies:\n  - name: default\n    algorithm: fixed_window\n    limits: [{limit: 10, window: 1m}]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := proctest.Run(t, rlnodeBin, []string{"RLNODE_CLUSTER_TOKEN=" + rlsToken}, "policy", "apply", "-f", file, "--addr", rig.urls["leader"])
		if code != 0 || strings.Contains(out, "removed envoy:") {
			t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
		}
		if r := ask(t, c, 0, desc("remote_address", "10.0.0.6")); r.GetStatuses()[0].GetCurrentLimit() == nil {
			t.Fatalf("the imported limit is gone after apply: %v", r)
		}
	})
}

// With TLS the gRPC port speaks TLS (mutual with --tls-ca): the client
// certificate rlnode tls init writes is served, a client without one is not.
func TestEnvoyRateLimitServiceTLS(t *testing.T) {
	dir := t.TempDir()
	proctest.TLSInit(t, rlnodeBin, dir, "n1")
	grpcAddr := proctest.FreeAddr(t)
	n := proctest.StartNode(t, rlnodeBin, "n1", append(proctest.TLSFlags(dir, "n1"), "--grpc-addr", grpcAddr)...)
	n.TLS = proctest.ClientTLS(t, dir, true)
	proctest.WaitReady(t, n, 15*time.Second)
	req := &rlsv3.RateLimitRequest{Domain: "none", Descriptors: []*commonv3.RateLimitDescriptor{desc("k", "v")}}
	for _, withCert := range []bool{true, false} {
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(proctest.ClientTLS(t, dir, withCert))))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req)
		cancel()
		switch {
		case withCert && (err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK):
			t.Fatalf("with the client certificate: %v %v", resp, err)
		case !withCert && err == nil:
			t.Fatal("served a client without a certificate")
		}
	}
}

// Silent TCP connections to the gRPC port (no TLS, no HTTP/2 preface) are
// closed after rls.HandshakeTimeout (5 s), not gRPC's default 120 s, and a
// real client is served while they are held.
func TestGRPCPortDropsSilentConnections(t *testing.T) {
	proctest.Long(t)
	addr := proctest.FreeAddr(t)
	n := proctest.StartNode(t, rlnodeBin, "n1", "--grpc-addr", addr)
	proctest.WaitReady(t, n, 15*time.Second)
	start := time.Now()
	silent := make([]net.Conn, 300)
	for i := range silent {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		defer c.Close()
		silent[i] = c
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health check while %d silent connections are held: %v %v", len(silent), h, err)
	}
	deadline := start.Add(12 * time.Second)
	for i, c := range silent {
		// The server speaks first (its HTTP/2 settings); read to the close.
		c.SetReadDeadline(deadline)
		_, err := io.Copy(io.Discard, c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("silent connection %d still open after %s", i, time.Since(start).Round(time.Second))
		}
	}
	if took := time.Since(start); took < 4*time.Second {
		t.Errorf("silent connections closed after %s; the handshake timeout is 5 s", took)
	}
}
