package httpapi_test

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/httpapi"
	"github.com/rlnode/rlnode/internal/golden"
	"github.com/rlnode/rlnode/policy"
	"github.com/rlnode/rlnode/window"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/check_answers.golden from today's answers")

// recordedChecks keeps the metric labels each answer was observed under.
type recordedChecks struct {
	mu  sync.Mutex
	got []string
}

func (r *recordedChecks) ObserveCheck(pol, result string, _ time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, pol+" "+result)
}

func (r *recordedChecks) take() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := strings.Join(r.got, "; ")
	r.got = nil
	return s
}

// goldenCase is one request and what the fake cluster answers it.
type goldenCase struct {
	name, method, path string
	// headers is the API's --headers choice (zero: both).
	headers httpapi.HeaderSet
	header  map[string]string
	body    string
	answer  func(hits []cluster.Hit) (cluster.CheckResult, error)
}

func oneHit(h cluster.Hit, o window.Outcome, parts ...window.Result) cluster.HitResult {
	hr := cluster.HitResult{Policy: h.Policy, Client: h.Client, Cost: h.Cost, Outcome: o, Parts: parts}
	for i, p := range parts {
		if p.Remaining < parts[hr.Main].Remaining {
			hr.Main = i
		}
	}
	return hr
}

func decided(allowed bool, servedBy, how string, hits ...cluster.HitResult) cluster.CheckResult {
	return cluster.CheckResult{Allowed: allowed, Hits: hits, Now: 1_700_000_000_123, ServedBy: servedBy, Decided: how}
}

func goldenCases() []goldenCase {
	fixedOK := window.Result{Outcome: window.Allowed, Limit: 5, WindowMs: 60_000, Remaining: 3, ResetAt: 1_700_000_041_000, WindowStart: 1_699_999_981_000}
	fixedNo := window.Result{Outcome: window.Refused, Limit: 5, WindowMs: 60_000, ResetAt: 1_700_000_001_500, RetryAfterMs: 1377, WindowStart: 1_699_999_941_500}
	secOK := window.Result{Outcome: window.Allowed, Limit: 10, WindowMs: 1000, Remaining: 9, ResetAt: 1_700_000_000_900, WindowStart: 1_699_999_999_900}
	hourNo := window.Result{Outcome: window.Refused, Limit: 100, WindowMs: 3_600_000, ResetAt: 1_700_003_000_000, RetryAfterMs: 3_000_000, WindowStart: 1_699_999_400_000}
	bucketNo := window.Result{Outcome: window.Refused, Limit: 20, WindowMs: 1000, ResetAt: 1_700_000_000_173, RetryAfterMs: 50}
	odd := window.Result{Outcome: window.Allowed, Limit: 7, WindowMs: 250, Remaining: 6, ResetAt: 1_700_000_000_250, WindowStart: 1_700_000_000_000}
	tooBig := window.Result{Outcome: window.CostExceedsLimit, Limit: 5, WindowMs: 60_000, Remaining: 5, ResetAt: 1_700_000_060_123, RetryAfterMs: -1}
	with := func(r cluster.CheckResult, err error) func([]cluster.Hit) (cluster.CheckResult, error) {
		return func([]cluster.Hit) (cluster.CheckResult, error) { return r, err }
	}
	answer := func(allowed bool, servedBy, how string, o window.Outcome, parts ...window.Result) func([]cluster.Hit) (cluster.CheckResult, error) {
		return func(hits []cluster.Hit) (cluster.CheckResult, error) {
			return decided(allowed, servedBy, how, oneHit(hits[0], o, parts...)), nil
		}
	}
	cases := []goldenCase{
		{name: "allowed, default policy, decided locally", path: "/check/alice", answer: answer(true, "n1", cluster.DecidedLocal, window.Allowed, fixedOK)},
		{name: "allowed, named policy, through the log", path: "/check/api/bob", answer: answer(true, "n2", "", window.Allowed, fixedOK)},
		{name: "allowed, two limits, cost 2", path: "/check/twolimits/carol?cost=2", answer: answer(true, "n1", cluster.DecidedLog, window.Allowed, secOK, fixedOK)},
		{name: "allowed, odd window", path: "/check/odd/dave", answer: answer(true, "n1", cluster.DecidedLog, window.Allowed, odd)},
		{name: "allowed, token bucket without window start", path: "/check/bucket/erin", answer: answer(true, "n3", cluster.DecidedLocal, window.Allowed,
			window.Result{Outcome: window.Allowed, Limit: 20, WindowMs: 1000, Remaining: 19, ResetAt: 1_700_000_000_173})},
		{name: "allowed, client needing escapes", path: "/check/api/a%3Cb%3E%26%22q%22", answer: answer(true, "n1", cluster.DecidedLog, window.Allowed, fixedOK)},
		{name: "refused, fixed window", path: "/check/api/bob", answer: answer(false, "n2", cluster.DecidedLog, window.Refused, fixedNo)},
		{name: "refused, decided locally", path: "/check/alice", answer: answer(false, "n1", cluster.DecidedLocal, window.Refused, fixedNo)},
		{name: "refused, one of two limits", path: "/check/twolimits/carol", answer: answer(false, "n1", cluster.DecidedLog, window.Refused, secOK, hourNo)},
		{name: "refused, token bucket", path: "/check/bucket/erin", answer: answer(false, "n1", cluster.DecidedLog, window.Refused, bucketNo)},
		{name: "refused, client needing escapes", path: "/check/api/%3Cscript%3E", answer: answer(false, "n1", cluster.DecidedLog, window.Refused, fixedNo)},
		{name: "refused, client with non-ASCII", path: "/check/api/%C3%A9%E2%80%A8", answer: answer(false, "n1", cluster.DecidedLog, window.Refused, fixedNo)},
		{name: "cost exceeds the limit, from the table", path: "/check/api/bob?cost=6"},
		{name: "cost exceeds the capacity of a bucket, from the table", path: "/check/bucket/erin?cost=21"},
		{name: "cost exceeds the limit, from the log", path: "/check/fresh/bob?cost=6", answer: answer(false, "n1", cluster.DecidedLog, window.CostExceedsLimit, tooBig)},
		{name: "concurrency policy", path: "/check/conc/bob"},
		{name: "shadow policy, would refuse", path: "/check/shadowed/bob", answer: answer(true, "n1", cluster.DecidedLog, window.Allowed, fixedNo)},
		{name: "shadow policy, cost beyond its limit goes to the log", path: "/check/shadowed/bob?cost=9", answer: answer(true, "n1", cluster.DecidedLog, window.Allowed, tooBig)},
		{name: "forward-auth on a shadow policy, would refuse", path: "/v1/auth/shadowed?key=header:X-User", header: map[string]string{"X-User": "u1"},
			answer: answer(true, "n1", cluster.DecidedLocal, window.Allowed, fixedNo)},
		{name: "forward-auth on a concurrency policy", path: "/v1/auth/conc?key=header:X-User", header: map[string]string{"X-User": "u1"}},
		{name: "unknown policy, from the log", path: "/check/nope/bob", answer: with(decided(false, "n1", cluster.DecidedLog, cluster.HitResult{Policy: "nope", Client: "bob", Cost: 1, UnknownPolicy: true}), nil)},
		{name: "invalid client", path: "/check/api/" + strings.Repeat("x", cluster.MaxClientLen+1)},
		{name: "invalid policy name", path: "/check/a%20b/bob"},
		{name: "invalid cost", path: "/check/api/bob?cost=0"},
		{name: "not counted", path: "/check/api/bob", answer: with(cluster.CheckResult{}, &cluster.HitError{Outcome: cluster.ErrNotCounted, Reason: cluster.ErrNoLeader})},
		{name: "outcome unknown", path: "/check/api/bob", answer: with(cluster.CheckResult{}, &cluster.HitError{Outcome: cluster.ErrOutcomeUnknown, Cause: fmt.Errorf("leadership lost while committing log")})},
		{name: "refusal passed on from the leader", path: "/check/api/bob", answer: with(cluster.CheckResult{}, &cluster.HitError{Outcome: cluster.ErrNotCounted, Cause: &cluster.HTTPError{Status: 400, Detail: "bad hit"}})},
		{name: "forward-auth allowed", path: "/v1/auth/api/some/path?key=header:X-User", header: map[string]string{"X-User": "u1"},
			answer: answer(true, "n1", cluster.DecidedLocal, window.Allowed, fixedOK)},
		{name: "forward-auth refused with 403", path: "/v1/auth/api?key=header:X-User&refuse_status=403", header: map[string]string{"X-User": "u1"},
			answer: answer(false, "n1", cluster.DecidedLog, window.Refused, fixedNo)},
		{name: "forward-auth cost from a header exceeds the limit", path: "/v1/auth/api?key=header:X-User&cost=header:X-Cost", header: map[string]string{"X-User": "u1", "X-Cost": "9"}},
		{name: "forward-auth without its key", path: "/v1/auth/api?key=header:X-User"},
		{name: "multi-hit check allowed", method: "POST", path: "/v1/check", body: `{"hits":[{"client":"a"},{"policy":"twolimits","client":"b","cost":2}]}`,
			answer: func(hits []cluster.Hit) (cluster.CheckResult, error) {
				return decided(true, "n1", cluster.DecidedLog, oneHit(hits[0], window.Allowed, fixedOK), oneHit(hits[1], window.Allowed, secOK, fixedOK)), nil
			}},
		{name: "multi-hit check refused", method: "POST", path: "/v1/check", body: `{"hits":[{"client":"a"},{"policy":"api","client":"b"}]}`,
			answer: func(hits []cluster.Hit) (cluster.CheckResult, error) {
				return decided(false, "n1", cluster.DecidedLog, oneHit(hits[0], window.Allowed, fixedOK), oneHit(hits[1], window.Refused, fixedNo)), nil
			}},
	}
	// The same answers with --headers ietf and --headers legacy: only the
	// rate-limit headers differ.
	for _, set := range []httpapi.HeaderSet{httpapi.HeadersIETF, httpapi.HeadersLegacy} {
		name := "--headers " + set.String() + ": "
		cases = append(cases,
			goldenCase{name: name + "allowed, two limits", headers: set, path: "/check/twolimits/carol", answer: answer(true, "n1", cluster.DecidedLog, window.Allowed, secOK, fixedOK)},
			goldenCase{name: name + "allowed, decided locally", headers: set, path: "/check/alice", answer: answer(true, "n1", cluster.DecidedLocal, window.Allowed, fixedOK)},
			goldenCase{name: name + "refused", headers: set, path: "/check/api/bob", answer: answer(false, "n2", cluster.DecidedLog, window.Refused, fixedNo)},
			goldenCase{name: name + "shadow policy, would refuse", headers: set, path: "/check/shadowed/bob", answer: answer(true, "n1", cluster.DecidedLog, window.Allowed, fixedNo)},
			goldenCase{name: name + "forward-auth refused with 403", headers: set, path: "/v1/auth/api?key=header:X-User&refuse_status=403", header: map[string]string{"X-User": "u1"},
				answer: answer(false, "n1", cluster.DecidedLog, window.Refused, fixedNo)},
			goldenCase{name: name + "multi-hit check (its headers are not a set's)", headers: set, method: "POST", path: "/v1/check", body: `{"hits":[{"client":"a"}]}`,
				answer: func(hits []cluster.Hit) (cluster.CheckResult, error) {
					return decided(true, "n1", cluster.DecidedLog, oneHit(hits[0], window.Allowed, fixedOK)), nil
				}},
		)
	}
	return cases
}

// TestCheckAnswersGolden pins every byte a check answers (status, headers
// but Date, body) and the metric labels it was observed under, for
// allowed, refused, cost-exceeds-limit and error answers, so the lean
// answer path stays byte-for-byte what it replaced. Run with -update to
// rewrite the file when an answer changes on purpose.
func TestCheckAnswersGolden(t *testing.T) {
	var current func([]cluster.Hit) (cluster.CheckResult, error)
	f := &fakeNode{
		check: func(hits []cluster.Hit) (cluster.CheckResult, error) { return current(hits) },
		policies: []policy.Policy{
			policy.Fixed(policy.Default, 5, time.Minute),
			policy.Fixed("api", 5, time.Minute),
			{Name: "twolimits", Limits: []policy.Limit{{Limit: 10, Window: policy.Duration(time.Second)}, {Limit: 100, Window: policy.Duration(time.Hour)}}},
			{Name: "odd", Limits: []policy.Limit{{Limit: 7, Window: policy.Duration(250 * time.Millisecond)}}},
			{Name: "bucket", Algorithm: window.TokenBucket.String(), Limits: []policy.Limit{{Limit: 10, Window: policy.Duration(time.Second), Burst: 20}}},
			{Name: "shadowed", Algorithm: window.FixedWindow.String(), Mode: policy.Shadow, Limits: []policy.Limit{{Limit: 5, Window: policy.Duration(time.Minute)}}},
			{Name: "conc", Algorithm: policy.Concurrency, Limits: []policy.Limit{{Limit: 3, Window: policy.Duration(time.Minute)}}},
		},
	}
	obs := &recordedChecks{}
	servers := map[httpapi.HeaderSet]*httptest.Server{}
	for _, set := range []httpapi.HeaderSet{httpapi.HeadersBoth, httpapi.HeadersIETF, httpapi.HeadersLegacy} {
		srv := httptest.NewServer(httpapi.New(httpapi.Config{Node: f, Metrics: obs, Headers: set}).Handler())
		t.Cleanup(srv.Close)
		servers[set] = srv
	}
	var out strings.Builder
	for _, gc := range goldenCases() {
		current = gc.answer
		if current == nil {
			current = func([]cluster.Hit) (cluster.CheckResult, error) {
				t.Errorf("%s: reached the cluster", gc.name)
				return cluster.CheckResult{}, fmt.Errorf("unexpected")
			}
		}
		method := gc.method
		if method == "" {
			method = "GET"
		}
		req, err := http.NewRequest(method, servers[gc.headers].URL+gc.path, strings.NewReader(gc.body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range gc.header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Fprintf(&out, "### %s\n%s %s\n%s\n", gc.name, method, gc.path, resp.Status)
		var keys []string
		for k := range resp.Header {
			if k != "Date" {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(&out, "%s: %q\n", k, resp.Header[k])
		}
		fmt.Fprintf(&out, "observed: %s\n%s\n", obs.take(), body)
	}
	golden.Check(t, "testdata/check_answers.golden", out.String(), *updateGolden)
}
