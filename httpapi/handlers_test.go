package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/httpapi"
	"github.com/rlnode/rlnode/policy"
	"github.com/rlnode/rlnode/window"
)

// fakeNode plays the roles httpapi declares, without Raft: each test sets
// the few calls its handler makes (envoyproxy/ratelimit's service tests
// against a mocked limiter are the model). A call a test did not expect
// panics, which the router answers 500.
type fakeNode struct {
	httpapi.Node
	httpapi.BackupAdmin
	check    func(hits []cluster.Hit) (cluster.CheckResult, error)
	peek     func(policy, client string, stale bool) (cluster.PeekResult, error)
	remove   func(id string) error
	restore  func(size int64, force bool) (cluster.Restored, error)
	policies []policy.Policy
}

func (f *fakeNode) Policy(name string) (policy.Policy, bool) {
	for _, p := range f.policies {
		if p.Name == name {
			return p, true
		}
	}
	return policy.Policy{}, false
}

func (f *fakeNode) Check(ctx context.Context, pol, client string, cost int64) (cluster.CheckResult, error) {
	return f.CheckAll(ctx, []cluster.Hit{{Policy: pol, Client: client, Cost: cost}})
}

// CheckOne answers as the node does: the cost pre-check against the
// table, then the test's check.
func (f *fakeNode) CheckOne(ctx context.Context, vh cluster.ValidHit, _ time.Duration, res *cluster.OneResult) error {
	hit := vh.Hit()
	*res = cluster.OneResult{}
	res.Policy, res.Known = f.Policy(hit.Policy)
	prechecked := res.Known && !res.Policy.IsShadow()
	if prechecked && res.Policy.IsConcurrency() {
		return nil
	}
	if prechecked {
		if res.Beyond, res.NeverAllowed = res.Policy.NeverAllows(hit.Cost); res.NeverAllowed {
			return nil
		}
	}
	var err error
	res.CheckResult, err = f.CheckAll(ctx, []cluster.Hit{hit})
	return err
}

func (f *fakeNode) CheckAll(_ context.Context, hits []cluster.Hit) (cluster.CheckResult, error) {
	return f.check(hits)
}

func (f *fakeNode) Peek(_ context.Context, pol, client string, stale bool) (cluster.PeekResult, error) {
	return f.peek(pol, client, stale)
}

func (f *fakeNode) Remove(_ context.Context, id string) error { return f.remove(id) }

func (f *fakeNode) RestoreBackup(_ context.Context, _ io.Reader, size int64, force bool) (cluster.Restored, error) {
	return f.restore(size, force)
}

func serve(t *testing.T, f *fakeNode, token string) string {
	t.Helper()
	if f.policies == nil {
		f.policies = []policy.Policy{policy.Fixed(policy.Default, 5, time.Minute)}
	}
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Node: f, Backups: f, Token: token}).Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// A failed hit is answered by what it means to the caller: not counted
// (safe to retry), no leader, or unknown, each a 503 with Retry-After and
// the cause once; a definite refusal the leader gave a forwarded hit is
// passed on as it came when it is the caller's mistake (400), and is a 503
// when the leader refused this node (its token, its membership).
func TestCheckAnswersFailedHitsByOutcome(t *testing.T) {
	cases := []struct {
		err          error
		status       int
		code, detail string
	}{
		{&cluster.HitError{Outcome: cluster.ErrNotCounted, Reason: cluster.ErrNoLeader}, 503, "no_leader",
			"the cluster has no leader right now; the hit was not counted"},
		{&cluster.HitError{Outcome: cluster.ErrNotCounted, Reason: cluster.ErrNotLeader, Cause: cluster.ErrClockSkew}, 503, "not_counted",
			"the hit was not counted (" + cluster.ErrClockSkew.Error() + ")"},
		{&cluster.HitError{Outcome: cluster.ErrOutcomeUnknown, Cause: errors.New("leadership lost while committing log")}, 503, "outcome_unknown",
			"the outcome of this hit is unknown: it may or may not have counted (leadership lost while committing log)"},
		{&cluster.HitError{Outcome: cluster.ErrNotCounted, Cause: &cluster.HTTPError{Status: 400, Code: "invalid_request", Detail: "bad client"}}, 400, "invalid_request",
			"the leader refused the request; nothing was counted (bad client)"},
		{&cluster.HitError{Outcome: cluster.ErrNotCounted, Cause: &cluster.HTTPError{Status: 401, Code: "unauthorized", Detail: "wrong token"}}, 503, "not_counted",
			"the leader refused this node's request; nothing was counted; ask another node (wrong token)"},
		{&cluster.HitError{Outcome: cluster.ErrNotCounted, Reason: cluster.ErrNotMember, Cause: errors.New("not a member of the cluster: the leader n1 removed it")}, 503, "not_member",
			"this node was removed from the cluster; nothing was counted; ask another node (not a member of the cluster: the leader n1 removed it)"},
	}
	for _, c := range cases {
		url := serve(t, &fakeNode{check: func([]cluster.Hit) (cluster.CheckResult, error) { return cluster.CheckResult{}, c.err }}, "")
		a := do(t, "GET", url+"/check/alice", "", "")
		if a.status != c.status || a.body["code"] != c.code || a.body["detail"] != c.detail {
			t.Errorf("%v: %d %s; want %d %s %q", c.err, a.status, a.raw, c.status, c.code, c.detail)
		}
		if c.status == 503 && a.header.Get("Retry-After") != "1" {
			t.Errorf("%v: Retry-After %q", c.err, a.header.Get("Retry-After"))
		}
	}
}

// A refused hit is a 429 with Retry-After rounded up to whole seconds and
// the served-by header; the handler reads nothing else.
func TestCheckRefusalFromTheLimiter(t *testing.T) {
	f := &fakeNode{check: func(hits []cluster.Hit) (cluster.CheckResult, error) {
		part := window.Result{Outcome: window.Refused, Limit: 5, WindowMs: 60_000, ResetAt: 1_001_500, RetryAfterMs: 1500}
		return cluster.CheckResult{Now: 1_000_000, ServedBy: "n2", Hits: []cluster.HitResult{
			{Policy: hits[0].Policy, Client: hits[0].Client, Cost: 1, Outcome: window.Refused, Parts: []window.Result{part}}}}, nil
	}}
	a := do(t, "GET", serve(t, f, "")+"/check/alice", "", "")
	if a.status != 429 || a.header.Get("Retry-After") != "2" || a.header.Get("X-Rlnode-Served-By") != "n2" || a.body["code"] != "quota_exceeded" {
		t.Fatalf("refusal: %d %v %s", a.status, a.header, a.raw)
	}
}

// Errors of a forwarded admin call come back as the cluster's own errors
// and get the same answers as on the leader.
func TestAdminErrorsFromTheLeader(t *testing.T) {
	f := &fakeNode{
		remove: func(id string) error { return fmt.Errorf("remove %s: %w", id, cluster.ErrUnknownServer) },
		peek: func(pol, _ string, _ bool) (cluster.PeekResult, error) {
			return cluster.PeekResult{}, fmt.Errorf("%w %q", cluster.ErrUnknownPolicy, pol)
		},
		restore: func(int64, bool) (cluster.Restored, error) {
			return cluster.Restored{}, fmt.Errorf("restore: %w: it holds 3 windows", cluster.ErrNotEmpty)
		},
	}
	url := serve(t, f, "s3cret")
	if a := do(t, "POST", url+"/v1/cluster/remove", "s3cret", `{"id":"n9"}`); a.status != 404 || a.body["code"] != "not_found" || a.body["detail"] != "remove n9: no such server in the cluster" {
		t.Errorf("remove of a stranger: %d %s", a.status, a.raw)
	}
	if a := do(t, "POST", url+"/v1/cluster/remove", "", `{"id":"n9"}`); a.status != 401 {
		t.Errorf("remove without the token: %d %s", a.status, a.raw)
	}
	if a := do(t, "GET", url+"/v1/status/nope/alice", "", ""); a.status != 404 || a.body["code"] != "unknown_policy" {
		t.Errorf("peek of an unknown policy: %d %s", a.status, a.raw)
	}
	if a := do(t, "POST", url+"/v1/cluster/restore", "s3cret", "not empty"); a.status != 409 || !strings.Contains(a.body["detail"].(string), "not empty") {
		t.Errorf("restore into a cluster with windows: %d %s", a.status, a.raw)
	}
}
