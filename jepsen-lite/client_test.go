package main

import (
	"context"
	"errors"
	"testing"

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
