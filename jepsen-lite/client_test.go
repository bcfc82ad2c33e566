package main

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/rlnode/rlnode/jepsen-lite/checker"
)

func TestClassify(t *testing.T) {
	timeout := context.DeadlineExceeded
	refused := errors.New("dial tcp 10.77.1.11:8080: connect: connection refused")
	cases := []struct {
		name    string
		kind    checker.Kind
		status  int
		body    string
		err     error
		sent    bool
		want    checker.Outcome
		allowed bool
		rem     int64
	}{
		{"allowed", checker.KindHit, 200, `{"allowed":true,"remaining":3,"resetAt":1700000002000,"limit":5}`, nil, true, checker.OutcomeOK, true, 3},
		{"refused", checker.KindHit, 429, `{"allowed":false,"remaining":0,"resetAt":1700000002000,"code":"quota_exceeded"}`, nil, true, checker.OutcomeOK, false, 0},
		{"200 saying not allowed", checker.KindHit, 200, `{"allowed":false,"remaining":0,"resetAt":1}`, nil, true, checker.OutcomeUnknown, false, 0},
		{"200 without resetAt", checker.KindHit, 200, `{"allowed":true,"remaining":3}`, nil, true, checker.OutcomeUnknown, false, 0},
		{"garbage 200", checker.KindHit, 200, `<html>`, nil, true, checker.OutcomeUnknown, false, 0},
		{"outcome unknown", checker.KindHit, 503, `{"code":"outcome_unknown","detail":"apply timed out"}`, nil, true, checker.OutcomeUnknown, false, 0},
		{"not counted", checker.KindHit, 503, `{"code":"not_counted"}`, nil, true, outcomeFail, false, 0},
		{"no leader", checker.KindHit, 503, `{"code":"no_leader"}`, nil, true, outcomeFail, false, 0},
		{"503 not_leader on a hit", checker.KindHit, 503, `{"code":"not_leader"}`, nil, true, checker.OutcomeUnknown, false, 0},
		{"503 without problem body", checker.KindHit, 503, `oops`, nil, true, checker.OutcomeUnknown, false, 0},
		{"500", checker.KindHit, 500, `{"code":"internal"}`, nil, true, checker.OutcomeUnknown, false, 0},
		{"timeout after sending", checker.KindHit, 0, ``, timeout, true, checker.OutcomeUnknown, false, 0},
		{"dial refused, never sent", checker.KindHit, 0, ``, refused, false, outcomeFail, false, 0},
		{"refused on a resend after a written attempt", checker.KindHit, 0, ``, refused, true, checker.OutcomeUnknown, false, 0},
		{"body read failed", checker.KindHit, 200, ``, errors.New("unexpected EOF"), true, checker.OutcomeUnknown, false, 0},
		{"peek ok", checker.KindPeek, 200, `{"windowStart":1700000000000,"used":2,"appliedNow":1700000000500,"active":true}`, nil, true, checker.OutcomeOK, false, 0},
		{"peek of unknown key", checker.KindPeek, 200, `{"windowStart":0,"used":0,"appliedNow":1700000000500}`, nil, true, checker.OutcomeOK, false, 0},
		{"peek missing appliedNow", checker.KindPeek, 200, `{"windowStart":0,"used":0}`, nil, true, checker.OutcomeUnknown, false, 0},
		{"peek not leader", checker.KindPeek, 503, `{"code":"not_leader"}`, nil, true, outcomeFail, false, 0},
		{"peek timeout", checker.KindPeek, 0, ``, timeout, true, checker.OutcomeUnknown, false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := classify(c.kind, c.status, []byte(c.body), c.err, c.sent)
			if r.Outcome != c.want {
				t.Fatalf("outcome = %q, want %q (error %q)", r.Outcome, c.want, r.Error)
			}
			if r.Outcome != checker.OutcomeOK && r.Error == "" {
				t.Error("a non-ok op must say why")
			}
			if c.want == checker.OutcomeOK && c.kind == checker.KindHit && (r.Allowed != c.allowed || r.Remaining != c.rem || r.ResetAt == 0) {
				t.Errorf("hit fields = %+v", r.Op)
			}
		})
	}
	peek := classify(checker.KindPeek, 200, []byte(`{"windowStart":7,"used":2,"appliedNow":9}`), nil, true)
	if peek.WindowStart != 7 || peek.Used != 2 || peek.AppliedNow != 9 {
		t.Errorf("peek fields = %+v", peek.Op)
	}
}

func TestClassifyPolicyAnswers(t *testing.T) {
	// a two-limit token bucket's 429: per-limit detail and retryAfterMs
	r := classify(checker.KindHit, 429, []byte(`{"allowed":false,"remaining":0,"resetAt":1700000007500,"retryAfterMs":200,
		"limits":[{"limit":2,"windowMs":1000,"remaining":0,"resetAt":1700000001000},{"limit":10,"windowMs":10000,"remaining":3,"resetAt":1700000007500}]}`), nil, true)
	if r.Outcome != checker.OutcomeOK || r.Allowed || r.RetryAfterMs != 200 || len(r.Limits) != 2 ||
		r.Limits[1] != (checker.LimitResult{Limit: 10, WindowMs: 10000, Remaining: 3, ResetAt: 1700000007500}) {
		t.Errorf("token bucket 429 = %+v", r)
	}
	// a sliding window's window start
	r = classify(checker.KindHit, 200, []byte(`{"allowed":true,"remaining":1,"resetAt":1700000004000,
		"limits":[{"limit":5,"windowMs":2000,"remaining":1,"resetAt":1700000004000,"windowStart":1700000000000}]}`), nil, true)
	if r.Outcome != checker.OutcomeOK || r.Limits[0].WindowStart != 1700000000000 {
		t.Errorf("sliding 200 = %+v", r)
	}

	multi := `{"allowed":false,"results":[
		{"allowed":true,"remaining":2,"resetAt":1700000002000,"policy":"jl-fixed","client":"k0","limits":[{"limit":5,"windowMs":2000,"remaining":2,"resetAt":1700000002000,"windowStart":1700000000000}]},
		{"allowed":false,"remaining":0,"resetAt":1700000004000,"retryAfterMs":167,"policy":"jl-sliding","client":"k1","limits":[{"limit":5,"windowMs":2000,"remaining":0,"resetAt":1700000004000,"windowStart":1700000002000}]}]}`
	ts := []target{{policy: "jl-fixed", client: "k0", key: "jl-fixed/k0"}, {policy: "jl-sliding", client: "k1", key: "jl-sliding/k1"}}
	r = classify(checker.KindMulti, 429, []byte(multi), nil, true)
	label(&r, 3, checker.KindMulti, nodeSpec{id: "n2"}, ts)
	if r.Outcome != checker.OutcomeOK || r.Allowed || len(r.Parts) != 2 || r.Key != "jl-fixed/k0" {
		t.Fatalf("multi 429 = %+v", r)
	}
	if p := r.Parts[1]; p.Key != "jl-sliding/k1" || p.Policy != "jl-sliding" || p.Allowed || p.RetryAfterMs != 167 || p.Limits[0].WindowStart != 1700000002000 {
		t.Errorf("second result = %+v", p)
	}
	if p := r.Parts[0]; p.Key != "jl-fixed/k0" || !p.Allowed || p.Remaining != 2 {
		t.Errorf("first result = %+v", p)
	}

	bad := []struct {
		name, body string
		status     int
	}{
		{"200 saying refused", `{"allowed":false,"results":[{"allowed":true,"remaining":1,"resetAt":1}]}`, 200},
		{"no results", `{"allowed":true,"results":[]}`, 200},
		{"result without remaining", `{"allowed":true,"results":[{"allowed":true,"resetAt":1},{"allowed":true,"remaining":1,"resetAt":1}]}`, 200},
		{"one result for two hits", `{"allowed":true,"results":[{"allowed":true,"remaining":1,"resetAt":1}]}`, 200},
	}
	for _, b := range bad {
		r := classify(checker.KindMulti, b.status, []byte(b.body), nil, true)
		label(&r, 0, checker.KindMulti, nodeSpec{id: "n1"}, ts)
		if r.Outcome != checker.OutcomeUnknown || r.Error == "" || len(r.Parts) != 2 || r.Parts[1].Key != "jl-sliding/k1" {
			t.Errorf("%s: %+v, want unknown with both keys named", b.name, r)
		}
	}
	// a lost multi-key check still names its keys for the checker
	r = classify(checker.KindMulti, 503, []byte(`{"code":"outcome_unknown"}`), nil, true)
	label(&r, 0, checker.KindMulti, nodeSpec{id: "n1"}, ts)
	if r.Outcome != checker.OutcomeUnknown || len(r.Parts) != 2 || r.Parts[0].Key != "jl-fixed/k0" {
		t.Errorf("lost multi = %+v", r)
	}
}

func TestTargetsAndRaise(t *testing.T) {
	ps := newPolicySet(5, 2*time.Second, true)
	ts, pairs := targets(6, ps.names(), ps.algorithms(), ps.leasedFlags(), 0)
	var keys []string
	for _, x := range ts {
		keys = append(keys, x.key)
	}
	want := []string{"jl-fixed/k0", "jl-sliding/k1", "jl-bucket/k2", "jl-fixed-epoch/k3", "jl-fixed/k4", "jl-sliding/k5",
		"jl-lfixed/l0", "jl-lsliding/l1", "jl-lbucket/l2"}
	if !slices.Equal(keys, want) || !ts[0].fixed || ts[1].fixed || !ts[3].fixed || ts[6].fixed {
		t.Errorf("targets = %+v", ts)
	}
	if !slices.Equal(pairs, [][2]int{{0, 1}, {2, 3}, {4, 5}}) {
		t.Errorf("pairs = %v", pairs)
	}
	// without policies: the default policy, nothing paired
	ts, pairs = targets(3, nil, nil, nil, 0)
	if ts[2].key != "k2" || ts[2].policy != "" || !ts[2].fixed || len(pairs) != 0 {
		t.Errorf("default targets = %+v %v", ts, pairs)
	}

	// every raise only raises, keeps the windows, and keeps token-bucket
	// refills on whole milliseconds; the checker accepts the result
	for range 3 {
		for _, p := range ps.pols {
			p.versions = append(p.versions, p.raised())
		}
	}
	cfg := checker.Config{Policies: ps.checkerPolicies()}
	if res := checker.Check(cfg, nil); !res.Valid {
		t.Fatalf("raised policies rejected: %+v", res.Violations)
	}
	b := ps.checkerPolicies()["jl-bucket"]
	if got := b.Versions[1]; got[0] != (checker.Limit{Limit: 5, WindowMs: 1000, Burst: 3}) || got[1] != (checker.Limit{Limit: 25, WindowMs: 10000, Burst: 11}) {
		t.Errorf("token bucket raised to %+v", got)
	}
	if lb := ps.pols[4].body(ps.pols[4].versions[0]); lb["consistency"] != "leased" {
		t.Errorf("leased PUT body = %+v", lb)
	}
	body := ps.pols[2].body(ps.pols[2].versions[0])
	if l := body["limits"].([]map[string]any); body["algorithm"] != "token_bucket" || l[1]["window"] != "10s" || l[1]["burst"] != int64(10) {
		t.Errorf("PUT body = %+v", body)
	}
}
