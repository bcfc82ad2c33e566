package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// dropInConfig uses what envoyproxy/ratelimit users' files use: a
// whitelisted value under a key with a default limit, shared and unshared
// wildcards, replaces, metadata. Day and week units keep every count in
// one window for the test's length (the day's boundary is checked for).
const dropInConfig = `
domain: dropin
descriptors:
  - key: client
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: client
    value: partner
  - key: tenant
    value: "t-*"
    share_threshold: true
    rate_limit: {unit: week, requests_per_unit: 2}
  - key: file
    value: "f*"
    rate_limit: {unit: week, requests_per_unit: 1}
  - key: plan
    value: gold
    metadata: {tier: gold}
    rate_limit: {name: gold, replaces: [{name: base}], unit: week, requests_per_unit: 5}
  - key: base
    rate_limit: {name: base, unit: week, requests_per_unit: 1}
  - key: user
    value_to_metric: true
    descriptors:
      - {key: op, detailed_metric: true, rate_limit: {unit: week, requests_per_unit: 9}}
`

// dropInMore configures the same domain from a second file (merged with
// --merge-domains, as MERGE_DOMAIN_CONFIG does).
const dropInMore = `
domain: dropin
descriptors:
  - {key: extra, rate_limit: {unit: week, requests_per_unit: 1}}
`

func askIn(t *testing.T, c rlsv3.RateLimitServiceClient, domain string, ds ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(authed(), 10*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

func verdictsOf(r *rlsv3.RateLimitResponse) string {
	s := r.GetOverallCode().String()
	for _, st := range r.GetStatuses() {
		s += " " + st.GetCode().String()
	}
	return s
}

func syncEnvoy(t *testing.T, addr string, args ...string) (string, int) {
	t.Helper()
	out, errOut, code := proctest.Run(t, rlnodeBin, []string{"RLNODE_CLUSTER_TOKEN=" + rlsToken},
		append([]string{"policy", "sync-envoy", "--addr", addr}, args...)...)
	return out + errOut, code
}

// TestEnvoyDropIn runs envoyproxy/ratelimit's configuration features
// through the binary: sync-envoy from a directory, then a real gRPC client
// through a follower, as Envoy would.
func TestEnvoyDropIn(t *testing.T) {
	nodes, grpcAddr := rlsNodes(t, "--rls-response-headers", "X-RateLimit-Limit,X-RateLimit-Remaining,X-RateLimit-Reset", "--rls-dynamic-metadata")
	dir := t.TempDir()
	for name, body := range map[string]string{"dropin.yaml": dropInConfig, "dropin-more.yaml": dropInMore} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, code := syncEnvoy(t, nodes[1].URL(), "--dir", dir); code != 2 || !strings.Contains(out, "duplicate domain 'dropin'") {
		t.Fatalf("sync-envoy of one domain in two files without --merge-domains: exit %d\n%s", code, out)
	}
	if out, code := syncEnvoy(t, nodes[1].URL(), "--dir", dir, "--merge-domains"); code != 0 ||
		!strings.Contains(out, "added envoy:dropin.client") || !strings.Contains(out, "added envoy:dropin.extra") {
		t.Fatalf("sync-envoy: exit %d\n%s", code, out)
	}
	rig := rlsDial(t, nodes, grpcAddr)
	c := rig.clients["follower"]
	// The follower matches with its own table: wait until it has applied
	// the whole import.
	proctest.Poll(t, 10*time.Second, func() error {
		r, err := proctest.Get(rig.urls["follower"] + "/v1/policies?stale=true")
		if err != nil {
			return err
		}
		if n := strings.Count(string(r.Raw), `"name":"envoy:dropin.`); n != 8 {
			return fmt.Errorf("the follower has %d of the 8 imported policies", n)
		}
		return nil
	})

	t.Run("a value without rate_limit whitelists it", func(t *testing.T) {
		for i := 0; i < 4; i++ {
			if r := askIn(t, c, "dropin", desc("client", "partner")); r.GetOverallCode() != rlsv3.RateLimitResponse_OK || r.GetStatuses()[0].GetCurrentLimit() != nil {
				t.Fatalf("partner hit %d: %v", i, r)
			}
		}
		got := ""
		for i := 0; i < 3; i++ {
			got += verdictsOf(askIn(t, c, "dropin", desc("client", "someone"))) + "; "
		}
		if got != "OK OK; OK OK; OVER_LIMIT OVER_LIMIT; " {
			t.Fatalf("someone: %s; want the key's default 2 per day", got)
		}
	})

	t.Run("wildcards: share_threshold shares, plain ones count per value", func(t *testing.T) {
		got := ""
		for _, v := range []string{"t-1", "t-2", "t-3"} {
			got += verdictsOf(askIn(t, c, "dropin", desc("tenant", v))) + "; "
		}
		if got != "OK OK; OK OK; OVER_LIMIT OVER_LIMIT; " {
			t.Fatalf("tenants: %s; want one counter of 2 for every t-*", got)
		}
		got = ""
		for _, v := range []string{"f1", "f2", "f1"} {
			got += verdictsOf(askIn(t, c, "dropin", desc("file", v))) + "; "
		}
		if got != "OK OK; OK OK; OVER_LIMIT OVER_LIMIT; " {
			t.Fatalf("files: %s; want 1 per file value", got)
		}
		if r := askIn(t, c, "dropin", desc("tenant", "x-1")); r.GetStatuses()[0].GetCurrentLimit() != nil {
			t.Fatalf("x-1 matched t-*: %v", r)
		}
	})

	t.Run("replaces, metadata and the response headers", func(t *testing.T) {
		for i := 0; i < 3; i++ {
			r := askIn(t, c, "dropin", desc("plan", "gold"), desc("base", "b"))
			if verdictsOf(r) != "OK OK OK" || r.GetStatuses()[1].GetCurrentLimit() != nil {
				t.Fatalf("gold with base, hit %d: %v; want base replaced", i, r)
			}
			md := r.GetDynamicMetadata().GetFields()
			if md["domain"].GetStringValue() != "dropin" || md["metadata"].GetStructValue().GetFields()["tier"].GetStringValue() != "gold" {
				t.Fatalf("dynamic metadata %v", r.GetDynamicMetadata())
			}
			if header(r, "X-RateLimit-Limit") != "5" || header(r, "X-RateLimit-Remaining") != strconv.Itoa(4-i) {
				t.Fatalf("headers %v", r.GetResponseHeadersToAdd())
			}
		}
		if got := verdictsOf(askIn(t, c, "dropin", desc("base", "b"))) + "; " + verdictsOf(askIn(t, c, "dropin", desc("base", "b"))); got != "OK OK; OVER_LIMIT OVER_LIMIT" {
			t.Fatalf("base alone: %s", got)
		}
	})

	t.Run("windows aligned to the epoch", func(t *testing.T) {
		const day = 86400
		before := time.Now().Unix()
		r := askIn(t, c, "dropin", desc("client", "aligned"))
		after := time.Now().Unix()
		if before/day != after/day {
			t.Skip("a day boundary passed during the request")
		}
		got := r.GetStatuses()[0].GetDurationUntilReset().AsDuration()
		// envoyproxy/ratelimit's answer: unit - now % unit, in whole seconds.
		lo, hi := time.Duration(day-after%day)*time.Second, time.Duration(day-before%day)*time.Second
		if got < lo || got > hi || got%time.Second != 0 {
			t.Fatalf("duration_until_reset %v; want the rest of the UTC day, %v..%v", got, lo, hi)
		}
		if h := header(r, "X-RateLimit-Reset"); h != strconv.FormatInt(int64(got/time.Second), 10) {
			t.Fatalf("X-RateLimit-Reset %q, duration_until_reset %v", h, got)
		}
	})

	t.Run("is_negative_hits refunds, never below zero", func(t *testing.T) {
		refund := desc("file", "fr")
		refund.IsNegativeHits = true
		got := ""
		for _, d := range []*commonv3.RateLimitDescriptor{desc("file", "fr"), desc("file", "fr"), refund, refund, desc("file", "fr"), desc("file", "fr")} {
			got += verdictsOf(askIn(t, c, "dropin", d)) + "; "
		}
		// 1 per week: spent, refused, two refunds (the second finds the
		// count at zero already), one hit has room again, the next not.
		if want := "OK OK; OVER_LIMIT OVER_LIMIT; OK OK; OK OK; OK OK; OVER_LIMIT OVER_LIMIT; "; got != want {
			t.Fatalf("file fr: %s; want %s", got, want)
		}
	})

	t.Run("per-descriptor metrics", func(t *testing.T) {
		askIn(t, c, "dropin", desc("user", "bob", "op", "read"))
		askIn(t, c, "dropin", desc("extra", "e"))
		resp, err := http.Get(rig.urls["follower"] + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, want := range []string{
			`rlnode_rls_rate_limit_total_hits_total{descriptor="client",domain="dropin"} 4`,
			`rlnode_rls_rate_limit_over_limit_total{descriptor="client",domain="dropin"} 1`,
			`rlnode_rls_rate_limit_within_limit_total{descriptor="tenant_t-*",domain="dropin"} 2`,
			`rlnode_rls_rate_limit_near_limit_total{descriptor="tenant_t-*",domain="dropin"} 1`,
			`rlnode_rls_rate_limit_total_hits_total{descriptor="user_bob.op_read",domain="dropin"} 1`,
			`rlnode_rls_rate_limit_within_limit_total{descriptor="extra",domain="dropin"} 1`,
		} {
			if !strings.Contains(string(b), want) {
				t.Errorf("metrics lack %s", want)
			}
		}
	})

	t.Run("sync-envoy: a bad file changes nothing, a removed file removes its domain", func(t *testing.T) {
		bad := filepath.Join(dir, "other.yaml")
		if err := os.WriteFile(bad, []byte("domain: other\ndescriptors:\n  - key: a\n    ratelimit: {unit: day, requests_per_unit: 1}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out, code := syncEnvoy(t, nodes[0].URL(), "--dir", dir, "--merge-domains")
		if code != 2 || !strings.Contains(out, "other.yaml: descriptors[0].ratelimit: config error, unknown key 'ratelimit'") {
			t.Fatalf("bad file: exit %d\n%s", code, out)
		}
		if r := askIn(t, c, "dropin", desc("file", "f9")); r.GetStatuses()[0].GetCurrentLimit() == nil {
			t.Fatalf("the bad file changed the table: %v", r)
		}
		if err := os.Remove(bad); err != nil {
			t.Fatal(err)
		}
		// The domain moves (one file gone, the other rewritten), and
		// back if an election spoilt the count.
		files := func(m map[string]string) {
			t.Helper()
			for _, name := range []string{"dropin.yaml", "dropin-more.yaml"} {
				if body, ok := m[name]; ok {
					if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
						t.Fatal(err)
					}
				} else if err := os.Remove(filepath.Join(dir, name)); err != nil && !os.IsNotExist(err) {
					t.Fatal(err)
				}
			}
		}
		moveBack := func() {
			files(map[string]string{"dropin.yaml": dropInConfig, "dropin-more.yaml": dropInMore})
			if out, code := syncEnvoy(t, nodes[0].URL(), "--dir", dir, "--merge-domains"); code != 0 {
				t.Fatalf("sync back to the dropin domain: exit %d\n%s", code, out)
			}
		}
		move := func() {
			files(map[string]string{"dropin.yaml": "domain: moved\ndescriptors:\n  - {key: k, rate_limit: {unit: day, requests_per_unit: 1}}\n"})
			out, code := syncEnvoy(t, nodes[0].URL(), "--dir", dir, "--merge-domains")
			if code != 0 || !strings.Contains(out, "added envoy:moved.k") || !strings.Contains(out, "removed envoy:dropin.client") {
				t.Fatalf("moved domain: exit %d\n%s", code, out)
			}
		}
		// Adds and removals are one change: one log entry, so no node
		// ever holds the new domain beside the old or neither.
		if n := entriesWrittenBy(t, nodes, moveBack, move); n != 1 {
			t.Fatalf("the sync wrote %d log entries, want 1", n)
		}
	})
}

// configMapSwap points dir/..data at a new directory holding files, as the
// kubelet updates a mounted ConfigMap: the top-level names are symlinks
// through ..data, swapped with one rename.
func configMapSwap(t *testing.T, dir, version string, files map[string]string) {
	t.Helper()
	ts := filepath.Join(dir, "..v"+version)
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(ts, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

func TestSyncEnvoyWatchesAConfigMap(t *testing.T) {
	nodes := proctest.StartCluster(t, rlnodeBin, 1, "--cluster-token", rlsToken)
	dir := t.TempDir()
	configMapSwap(t, dir, "1", map[string]string{"limits.yaml": "domain: cm\ndescriptors:\n  - {key: a, rate_limit: {unit: minute, requests_per_unit: 1}}\n"})
	metricsAddr := proctest.FreeAddr(t)
	proctest.Start(t, rlnodeBin, "sync-envoy", "policy", "sync-envoy", "--watch", "--interval", "100ms", "--dir", dir,
		"--metrics-addr", metricsAddr, "--addr", nodes[0].URL(), "--cluster-token", rlsToken)
	has := func(name string, want bool) func() error {
		return func() error {
			r, err := nodes[0].Do(http.MethodGet, "/v1/policies/"+name, rlsToken, nil)
			if err != nil {
				return err
			}
			if got := r.Status == http.StatusOK; got != want {
				return fmt.Errorf("policy %s: status %d, want present %v", name, r.Status, want)
			}
			return nil
		}
	}
	proctest.Poll(t, 20*time.Second, has("envoy:cm.a", true))

	configMapSwap(t, dir, "2", map[string]string{"limits.yaml": "domain: cm\ndescriptors:\n  - {key: b, rate_limit: {unit: minute, requests_per_unit: 1}}\n"})
	proctest.Poll(t, 20*time.Second, has("envoy:cm.b", true))
	proctest.Poll(t, 5*time.Second, has("envoy:cm.a", false))

	configMapSwap(t, dir, "3", map[string]string{"limits.yaml": "domain: cm\ndescriptors:\n  - {key: c, rate_limit: {unit: fortnight, requests_per_unit: 1}}\n"})
	proctest.Poll(t, 20*time.Second, func() error {
		r, err := proctest.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			return err
		}
		if body := string(r.Raw); !strings.Contains(body, `rlnode_envoy_sync_errors_total{stage="config"} 1`) || !strings.Contains(body, "rlnode_envoy_sync_config_ok 0") {
			return fmt.Errorf("metrics:\n%s", r.Raw)
		}
		return nil
	})
	if err := has("envoy:cm.b", true)(); err != nil {
		t.Fatalf("the refused file changed the table: %v", err)
	}
}

// TestEnvoyGlobalShadowMode: with --rls-shadow-mode the statuses say which
// descriptors are over, the request never is (envoyproxy/ratelimit's
// SHADOW_MODE).
func TestEnvoyGlobalShadowMode(t *testing.T) {
	grpcAddr := proctest.FreeAddr(t)
	nodes := proctest.StartCluster(t, rlnodeBin, 1, "--grpc-addr", grpcAddr, "--cluster-token", rlsToken, "--rls-shadow-mode")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "s.yaml"), []byte("domain: s\ndescriptors:\n  - {key: k, rate_limit: {unit: week, requests_per_unit: 1}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := syncEnvoy(t, nodes[0].URL(), "--dir", dir); code != 0 {
		t.Fatalf("sync-envoy: exit %d\n%s", code, out)
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := rlsv3.NewRateLimitServiceClient(conn)
	if got := verdictsOf(askIn(t, c, "s", desc("k", "v"))) + "; " + verdictsOf(askIn(t, c, "s", desc("k", "v"))); got != "OK OK; OK OVER_LIMIT" {
		t.Fatalf("%s; want the second over its limit and let through", got)
	}
	r, err := proctest.Get(nodes[0].URL() + "/metrics")
	if err != nil || !strings.Contains(string(r.Raw), `rlnode_rls_descriptors_total{domain="s",result="global_shadow_mode"} 1`) {
		t.Fatalf("metrics (%v):\n%s", err, r.Raw)
	}
}
