package rls

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/internal/golden"
	"github.com/rlnode/rlnode/metrics"
	"github.com/rlnode/rlnode/policy"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/answers.golden from today's answers")

// goldenConfig has a descriptor of every shape the tree matches: a key
// alone, a key and value, a wildcard value, a nested pair, unlimited,
// shadow_mode, quota_mode, metadata and a named limit.
const goldenConfig = `
domain: g
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: path
    value: /login
    rate_limit: {unit: hour, requests_per_unit: 1, name: login}
  - key: path
    value: /api/*
    rate_limit: {unit: hour, requests_per_unit: 50}
  - key: tenant
    descriptors:
      - key: user
        detailed_metric: true
        rate_limit: {unit: day, requests_per_unit: 3}
  - key: internal
    rate_limit: {unlimited: true}
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: quota
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: tagged
    value: gold
    metadata: {tier: gold}
    rate_limit: {unit: day, requests_per_unit: 5}
  - key: bulk
    rate_limit: {unit: day, requests_per_unit: 10}
`

// goldenObserver keeps what the server observed, in order, per request.
type goldenObserver struct {
	mu  sync.Mutex
	got []string
}

func (o *goldenObserver) RLSDescriptor(domain, result string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, domain+" "+result)
}

func (o *goldenObserver) RLSLimit(domain, descriptor string, st metrics.RLSLimitStats) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, fmt.Sprintf("%s/%s total=%d over=%d near=%d within=%d shadow=%d",
		domain, descriptor, st.TotalHits, st.OverLimit, st.NearLimit, st.WithinLimit, st.ShadowMode))
}

func (o *goldenObserver) take() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := strings.Join(o.got, "; ")
	o.got = nil
	return s
}

// rlsGoldenCase is one request, sent to the plain server or to the one in
// global shadow mode.
type rlsGoldenCase struct {
	name         string
	globalShadow bool
	req          *rlsv3.RateLimitRequest
}

func desc(kv ...string) *commonv3.RateLimitDescriptor { return entries(kv...) }

func withAddend(d *commonv3.RateLimitDescriptor, n uint64) *commonv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func negative(d *commonv3.RateLimitDescriptor) *commonv3.RateLimitDescriptor {
	d.IsNegativeHits = true
	return d
}

func overridden(d *commonv3.RateLimitDescriptor, perUnit uint32, unit typev3.RateLimitUnit) *commonv3.RateLimitDescriptor {
	d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: perUnit, Unit: unit}
	return d
}

func greq(domain string, ds ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds}
}

func rlsGoldenCases() []rlsGoldenCase {
	tooMany := make([]*commonv3.RateLimitDescriptor, 1001)
	for i := range tooMany {
		tooMany[i] = desc("bulk", "many")
	}
	return []rlsGoldenCase{
		{name: "key alone, first hit", req: greq("g", desc("remote_address", "10.0.0.1"))},
		{name: "key alone, last hit with room", req: greq("g", desc("remote_address", "10.0.0.1"))},
		{name: "key alone, over the limit", req: greq("g", desc("remote_address", "10.0.0.1"))},
		{name: "key and value", req: greq("g", desc("path", "/login"))},
		{name: "key and value, over the named limit", req: greq("g", desc("path", "/login"))},
		{name: "wildcard value", req: greq("g", desc("path", "/api/users"))},
		{name: "key with an unmatched value", req: greq("g", desc("path", "/home"))},
		{name: "nested pair", req: greq("g", desc("tenant", "acme", "user", "u1"))},
		{name: "nested pair, outer key alone matches nothing", req: greq("g", desc("tenant", "acme"))},
		{name: "unlimited", req: greq("g", desc("internal", "batch"))},
		{name: "unknown descriptor key", req: greq("g", desc("nope", "1"))},
		{name: "unknown domain", req: greq("other", desc("remote_address", "10.0.0.1"))},
		{name: "all or nothing: one over, the other not counted", req: greq("g", desc("remote_address", "10.0.0.2"), desc("path", "/login"))},
		{name: "all or nothing: the other still has its whole limit", req: greq("g", desc("remote_address", "10.0.0.2"))},
		{name: "several descriptors, all allowed", req: greq("g", desc("remote_address", "10.0.0.3"), desc("tenant", "acme", "user", "u2"), desc("nope", "x"))},
		{name: "hits_addend 3", req: greq("g", withAddend(desc("bulk", "b"), 3))},
		{name: "hits_addend 0 counts nothing", req: greq("g", withAddend(desc("bulk", "b"), 0))},
		{name: "hits_addend 8 with 7 left", req: greq("g", withAddend(desc("bulk", "b"), 8))},
		{name: "request hits_addend 2", req: &rlsv3.RateLimitRequest{Domain: "g", HitsAddend: 2, Descriptors: []*commonv3.RateLimitDescriptor{desc("bulk", "b")}}},
		{name: "is_negative_hits 4 gives back", req: greq("g", negative(withAddend(desc("bulk", "b"), 4)))},
		{name: "after the refund", req: greq("g", withAddend(desc("bulk", "b"), 0))},
		{name: "shadow_mode, first hit", req: greq("g", desc("shadowed", "s"))},
		{name: "shadow_mode, over but allowed", req: greq("g", desc("shadowed", "s"))},
		{name: "quota_mode, first hit", req: greq("g", desc("quota", "q"))},
		{name: "quota_mode, the only quota descriptor over", req: greq("g", desc("quota", "q"))},
		{name: "metadata of a passing descriptor", req: greq("g", desc("tagged", "gold"))},
		{name: "limit override", req: greq("g", overridden(desc("bulk", "o"), 4, typev3.RateLimitUnit_DAY))},
		{name: "limit override, second hit", req: greq("g", overridden(desc("bulk", "o"), 4, typev3.RateLimitUnit_DAY))},
		{name: "limit override of an unknown key", req: greq("g", overridden(desc("nope", "o"), 1, typev3.RateLimitUnit_HOUR))},
		{name: "concurrency, first permit", req: greq("g", desc("stream", "c1"))},
		{name: "concurrency, second permit", req: greq("g", desc("stream", "c1"))},
		{name: "concurrency, over", req: greq("g", desc("stream", "c1"))},
		{name: "concurrency, is_negative_hits gives the oldest back", req: greq("g", negative(desc("stream", "c1")))},
		{name: "concurrency, a permit again", req: greq("g", desc("stream", "c1"))},
		{name: "global shadow mode, over but allowed", globalShadow: true, req: greq("g", desc("remote_address", "10.0.0.1"), desc("tenant", "acme", "user", "u3"))},
		{name: "refused: empty domain", req: greq("", desc("bulk", "b"))},
		{name: "refused: no descriptors", req: greq("g")},
		{name: "refused: too many descriptors", req: greq("g", tooMany...)},
		{name: "refused: override with an unknown unit", req: greq("g", overridden(desc("bulk", "u"), 3, typev3.RateLimitUnit_UNKNOWN))},
	}
}

// startGolden serves goldenConfig's policies and a concurrency policy
// from a one-node in-process cluster (real Raft, real data dir) on two
// gRPC ports on loopback: the plain server (response headers and dynamic
// metadata on) and one in global shadow mode.
func startGolden(t *testing.T, obs Observer) (plain, shadow rlsv3.RateLimitServiceClient) {
	t.Helper()
	_, ps, err := policy.LoadEnvoy([]policy.EnvoyFile{{Name: "g.yaml", Data: []byte(goldenConfig)}}, policy.EnvoyOptions{Anchored: true})
	if err != nil {
		t.Fatal(err)
	}
	ps = append(ps, policy.Policy{Name: "streams", Algorithm: policy.Concurrency, Limits: []policy.Limit{{Limit: 2}},
		Envoy: &policy.Envoy{Domain: "g", Descriptors: []policy.EnvoyEntry{{Key: "stream"}}}})
	c := clustertest.Start(t, 1, clustertest.Options{Policies: ps})
	n := c.Leader(10 * time.Second).Node
	serve := func(cfg Config) rlsv3.RateLimitServiceClient {
		cfg.Limiter, cfg.Observer, cfg.PermitTTL = n, obs, time.Minute
		s := New(cfg)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go s.Serve(ln)
		t.Cleanup(func() { s.Stop(context.Background()) })
		conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return rlsv3.NewRateLimitServiceClient(conn)
	}
	return serve(Config{ResponseHeaders: &DefaultHeaderNames, DynamicMetadata: true}), serve(Config{GlobalShadowMode: true})
}

// Seconds left depend on when the test runs: windows here are anchored at
// their first hit, but overrides are epoch-aligned and a permit's time is
// its TTL's. A status's seconds are written as the bound its unit sets
// (and kept as they are, failing, past it); in headers, which do not say
// their unit, as at most a day.
var secondsInHeader = regexp.MustCompile(`(t=|Reset: |retry-after: )(\d+)`)

func boundHeaderSeconds(s string) string {
	return secondsInHeader.ReplaceAllStringFunc(s, func(m string) string {
		sub := secondsInHeader.FindStringSubmatch(m)
		if v, err := strconv.ParseInt(sub[2], 10, 64); err == nil && v <= 86400 {
			return sub[1] + "<=86400"
		}
		return m
	})
}

// unitSeconds bounds a status's seconds left: its limit's unit, or the
// permit TTL (a minute here) for a concurrency descriptor, whose unit is
// UNKNOWN.
var unitSeconds = map[rlsv3.RateLimitResponse_RateLimit_Unit]int64{
	rlsv3.RateLimitResponse_RateLimit_SECOND: 1, rlsv3.RateLimitResponse_RateLimit_MINUTE: 60,
	rlsv3.RateLimitResponse_RateLimit_HOUR: 3600, rlsv3.RateLimitResponse_RateLimit_DAY: 86400,
	rlsv3.RateLimitResponse_RateLimit_UNKNOWN: 60,
}

func boundStatusSeconds(unit rlsv3.RateLimitResponse_RateLimit_Unit, secs int64) string {
	if u, ok := unitSeconds[unit]; ok && secs >= 0 && secs <= u {
		return "<=" + strconv.FormatInt(u, 10)
	}
	return strconv.FormatInt(secs, 10)
}

// describeAnswer writes a response as text a reviewer can read: codes,
// each status, the headers in order and the dynamic metadata as JSON
// (sorted keys).
func describeAnswer(out *strings.Builder, resp *rlsv3.RateLimitResponse, err error) {
	if err != nil {
		st, _ := status.FromError(err)
		fmt.Fprintf(out, "error %s: %s\n", st.Code(), st.Message())
		return
	}
	fmt.Fprintf(out, "overall %s\n", resp.GetOverallCode())
	for i, st := range resp.GetStatuses() {
		fmt.Fprintf(out, "status[%d] %s", i, st.GetCode())
		if cl := st.GetCurrentLimit(); cl != nil {
			fmt.Fprintf(out, " limit=%q/%d/%s remaining=%d durationUntilReset=%s", cl.GetName(), cl.GetRequestsPerUnit(), cl.GetUnit(),
				st.GetLimitRemaining(), boundStatusSeconds(cl.GetUnit(), st.GetDurationUntilReset().GetSeconds()))
		} else if st.GetLimitRemaining() != 0 {
			fmt.Fprintf(out, " remaining=%d", st.GetLimitRemaining())
		}
		out.WriteString("\n")
	}
	for _, h := range resp.GetResponseHeadersToAdd() {
		fmt.Fprintf(out, "header %s: %s\n", h.GetKey(), h.GetValue())
	}
	for _, h := range resp.GetRequestHeadersToAdd() {
		fmt.Fprintf(out, "request header %s: %s\n", h.GetKey(), h.GetValue())
	}
	if md := resp.GetDynamicMetadata(); md != nil {
		b, err := json.Marshal(md.AsMap())
		if err != nil {
			b = []byte(err.Error())
		}
		// A limit override is in it as the proto's String(), whose
		// spacing protobuf-go varies on purpose between builds: runs of
		// spaces are one here.
		fmt.Fprintf(out, "metadata %s\n", strings.Join(strings.Fields(string(b)), " "))
	}
}

// TestAnswersGolden pins what ShouldRateLimit answers, over real gRPC from
// a real one-node cluster, for every descriptor shape, overrides,
// hits_addend (descriptor and request), is_negative_hits, concurrency
// descriptors, shadow_mode, quota_mode, the global shadow mode, refusals
// and descriptors nothing matches, with the stats observed for each: a
// change of the decision path (one call into the node, pooled responses)
// must answer byte for byte the same. Seconds left are written as the
// bound they must keep (boundStatusSeconds, boundHeaderSeconds). Run with -update to rewrite the file when an
// answer changes on purpose.
func TestAnswersGolden(t *testing.T) {
	obs := &goldenObserver{}
	plain, shadow := startGolden(t, obs)
	var out strings.Builder
	for _, gc := range rlsGoldenCases() {
		client := plain
		if gc.globalShadow {
			client = shadow
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := client.ShouldRateLimit(ctx, gc.req)
		cancel()
		var answer strings.Builder
		describeAnswer(&answer, resp, err)
		fmt.Fprintf(&out, "### %s\n%s\n%sobserved: %s\n\n", gc.name, requestWords(gc.req), boundHeaderSeconds(answer.String()), obs.take())
	}
	golden.Check(t, "testdata/answers.golden", out.String(), *updateGolden)
}

// requestWords is a request in one line: domain, hits_addend and each
// descriptor's entries, addend, override and sign.
func requestWords(r *rlsv3.RateLimitRequest) string {
	var b strings.Builder
	fmt.Fprintf(&b, "domain=%q", r.GetDomain())
	if r.GetHitsAddend() != 0 {
		fmt.Fprintf(&b, " hits_addend=%d", r.GetHitsAddend())
	}
	ds := r.GetDescriptors()
	if len(ds) > 3 {
		fmt.Fprintf(&b, " (%d descriptors)", len(ds))
		return b.String()
	}
	for _, d := range ds {
		b.WriteString(" [")
		for i, e := range d.GetEntries() {
			if i > 0 {
				b.WriteString(" ")
			}
			fmt.Fprintf(&b, "%s=%s", e.GetKey(), e.GetValue())
		}
		if h := d.GetHitsAddend(); h != nil {
			fmt.Fprintf(&b, " hits_addend=%d", h.GetValue())
		}
		if d.GetIsNegativeHits() {
			b.WriteString(" is_negative_hits")
		}
		if l := d.GetLimit(); l != nil {
			fmt.Fprintf(&b, " limit=%d/%s", l.GetRequestsPerUnit(), l.GetUnit())
		}
		b.WriteString("]")
	}
	return b.String()
}
