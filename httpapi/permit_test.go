package httpapi_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/httpapi/apitest"
	"github.com/rlnode/rlnode/policy"
)

func concurrencyPolicy(name string, n int64) policy.Policy {
	return policy.Policy{Name: name, Algorithm: policy.Concurrency, Limits: []policy.Limit{{Limit: n}}}
}

// TestPermitsOverHTTP: at most N live, 429 with Retry-After until the
// earliest ends, release and renew only with the credential that took the
// permit, bad input a 400 naming the field.
func TestPermitsOverHTTP(t *testing.T) {
	c := apitest.Start(t, 1, clustertest.Options{Policies: []policy.Policy{concurrencyPolicy("jobs", 2),
		policy.Fixed("fw", 10, time.Minute)}})
	url := c.Leader(5*time.Second).URL() + "/v1/permits"
	body := `{"policy":"jobs","client":"alice","ttl":"30s"}`
	a := do(t, "POST", url, "tok-a", body)
	b := do(t, "POST", url, "tok-a", `{"policy":"jobs","client":"alice","ttl":"10s"}`)
	if a.status != 201 || b.status != 201 || len(a.body["permit"].(string)) != 32 || a.body["expiresAt"] == nil {
		t.Fatalf("acquires: %d %s / %d %s", a.status, a.raw, b.status, b.raw)
	}
	full := do(t, "POST", url, "tok-a", body)
	if full.status != 429 || full.header.Get("Retry-After") != "10" || full.body["live"] != 2.0 {
		t.Fatalf("third of 2: %d %s Retry-After %q", full.status, full.raw, full.header.Get("Retry-After"))
	}
	if r := do(t, "POST", url, "", `{"policy":"jobs","client":"bob"}`); r.status != 201 {
		t.Fatalf("another key: %d %s", r.status, r.raw)
	}
	id := a.body["permit"].(string)
	if r := do(t, "DELETE", url+"/"+id, "tok-b", ""); r.status != 404 {
		t.Fatalf("release with another credential: %d %s", r.status, r.raw)
	}
	if r := do(t, "POST", url+"/"+id+"/renew", "tok-a", `{"ttl":"1m"}`); r.status != 200 || r.body["permit"] != id {
		t.Fatalf("renew: %d %s", r.status, r.raw)
	}
	if r := do(t, "DELETE", url+"/"+id, "tok-a", ""); r.status != 200 || r.body["live"] != 1.0 {
		t.Fatalf("release: %d %s", r.status, r.raw)
	}
	if r := do(t, "DELETE", url+"/"+id, "tok-a", ""); r.status != 404 {
		t.Fatalf("second release: %d %s", r.status, r.raw)
	}
	if r := do(t, "POST", url, "tok-a", body); r.status != 201 {
		t.Fatalf("acquire after a release: %d %s", r.status, r.raw)
	}
	for in, field := range map[string]string{
		`{"policy":"jobs","client":"alice","ttl":"2h"}`:   "ttl",
		`{"policy":"jobs","client":"alice","ttl":"soon"}`: "ttl",
		`{"policy":"jobs","client":""}`:                   "client",
		`{"policy":"fw","client":"alice"}`:                "policy",
	} {
		if r := do(t, "POST", url, "", in); r.status != 400 || !strings.HasPrefix(r.body["detail"].(string), field) {
			t.Errorf("%s: %d %s, want a 400 naming %s", in, r.status, r.raw, field)
		}
	}
	if r := do(t, "GET", c.Leader(time.Second).URL()+"/check/jobs/alice", "", ""); r.status != 400 || r.body["code"] != "wrong_policy" {
		t.Fatalf("a permit policy with /check: %d %s", r.status, r.raw)
	}
}

// TestReservationsOverHTTP: units counted at once on every key, all or
// nothing; a settle gives back or charges the difference, once.
func TestReservationsOverHTTP(t *testing.T) {
	c := apitest.Start(t, 1, clustertest.Options{Policies: []policy.Policy{policy.Fixed("in", 1000, time.Hour),
		policy.Fixed("usd", 10, time.Hour), concurrencyPolicy("jobs", 1)}})
	base := c.Leader(5 * time.Second).URL()
	r := do(t, "POST", base+"/v1/reservations", "tok", `{"keys":[{"policy":"in","client":"u","units":400},{"policy":"usd","client":"u","units":4}],"ttl":"1m"}`)
	if r.status != 201 || len(r.body["reservation"].(string)) != 32 {
		t.Fatalf("reserve: %d %s", r.status, r.raw)
	}
	id := r.body["reservation"].(string)
	if r := do(t, "POST", base+"/v1/reservations", "tok", `{"keys":[{"policy":"in","client":"u","units":400},{"policy":"usd","client":"u","units":7}]}`); r.status != 429 || r.header.Get("Retry-After") == "" {
		t.Fatalf("reserve past usd's limit: %d %s", r.status, r.raw)
	}
	// Nothing half-applied: in still has 600.
	if r := do(t, "GET", base+"/check/in/u?cost=600", "", ""); r.status != 200 {
		t.Fatalf("the refused reservation charged in: %d %s", r.status, r.raw)
	}
	if r := do(t, "POST", base+"/v1/reservations/"+id+"/settle", "other", `{"units":1}`); r.status != 404 {
		t.Fatalf("settle with another credential: %d %s", r.status, r.raw)
	}
	s := do(t, "POST", base+"/v1/reservations/"+id+"/settle", "tok", `{"units":1}`)
	if s.status != 200 || s.body["refunded"].([]any)[1] != 3.0 || s.body["overdraft"] != 0.0 {
		t.Fatalf("settle: %d %s", s.status, s.raw)
	}
	if r := do(t, "POST", base+"/v1/reservations/"+id+"/settle", "tok", `{"units":1}`); r.status != 409 {
		t.Fatalf("second settle: %d %s", r.status, r.raw)
	}
	if r := do(t, "GET", base+"/check/usd/u?cost=9", "", ""); r.status != 200 {
		t.Fatalf("usd after settling 1 of 4: %d %s", r.status, r.raw)
	}
	for in, field := range map[string]string{
		`{"policy":"jobs","client":"u","units":1}`:            "policy",
		`{"policy":"in","client":"u","units":0}`:              "units",
		`{"policy":"in","client":"u","units":1,"ttl":"3h"}`:   "ttl",
		`{"keys":[{"policy":"in","client":"","units":1}]}`:    "keys[0].client",
		`{"keys":[{"policy":"nope","client":"u","units":1}]}`: "keys[0].policy",
	} {
		if r := do(t, "POST", base+"/v1/reservations", "", in); r.status/100 != 4 || !strings.HasPrefix(r.body["detail"].(string), field) {
			t.Errorf("%s: %d %s, want a 4xx naming %s", in, r.status, r.raw, field)
		}
	}
	if r := do(t, "POST", base+"/v1/reservations/"+strings.Repeat("0", 32)+"/settle", "tok", `{"units":1}`); r.status != 404 {
		t.Fatalf("settle of an unknown id: %d %s", r.status, r.raw)
	}
}

// TestPermitsNeedEveryVoterOnFormatR4: on a cluster whose voters cannot
// all apply the new entries (they report format 3, as nodes of the
// previous release do), a permit is refused before the log.
func TestPermitsNeedEveryVoterOnFormatR4(t *testing.T) {
	c := apitest.Start(t, 3, clustertest.Options{Policies: []policy.Policy{policy.Fixed("fw", 10, time.Minute)},
		Formats: map[string]fsm.Format{"n1": fsm.FormatR3, "n2": fsm.FormatR3, "n3": fsm.FormatR3}})
	leader := c.Leader(5 * time.Second)
	r := do(t, "POST", leader.URL()+"/v1/reservations", "", `{"policy":"fw","client":"u","units":1}`)
	if r.status != 409 || r.body["code"] != "cluster_upgrading" {
		t.Fatalf("reservation on a cluster of format-3 voters: %d %s", r.status, r.raw)
	}
	// Through a follower: forwarded to the leader, refused there, the
	// refusal carried back by name.
	follower := c.Followers(leader)[0]
	for path, body := range map[string]string{
		"/v1/reservations": `{"policy":"fw","client":"u","units":1}`,
		"/v1/reservations/" + strings.Repeat("a", 32) + "/settle": `{"units":1}`,
		"/v1/permits/" + strings.Repeat("a", 32) + "/renew":       `{"ttl":"1s"}`,
	} {
		if r := do(t, "POST", follower.URL()+path, "", body); r.status != 409 || r.body["code"] != "cluster_upgrading" {
			t.Fatalf("%s through a follower: %d %s", path, r.status, r.raw)
		}
	}
	if r := do(t, "GET", leader.URL()+"/check/fw/u?cost=10", "", ""); r.status != 200 {
		t.Fatalf("the refused reservation counted: %d %s", r.status, r.raw)
	}
}

// TestPermitsThroughAFollowerRightAfterThePolicyIsMade: a follower that
// has not applied the entry defining a policy yet looks it up on the
// leader instead of answering 404 (as the lease API does). Each round
// makes a new policy on the leader and at once takes a permit and a
// reservation through a follower: every answer is a 201. A policy that
// exists nowhere is still a 404.
func TestPermitsThroughAFollowerRightAfterThePolicyIsMade(t *testing.T) {
	c := apitest.Start(t, 3, clustertest.Options{})
	leader := c.Leader(5 * time.Second)
	followers := c.Followers(leader)
	for i := range 12 {
		jobs, tokens := fmt.Sprintf("jobs%d", i), fmt.Sprintf("tokens%d", i)
		if r := do(t, "PUT", leader.URL()+"/v1/policies/"+jobs, "", `{"algorithm":"concurrency","limits":[{"limit":1}]}`); r.status/100 != 2 {
			t.Fatalf("put %s: %d %s", jobs, r.status, r.raw)
		}
		if r := do(t, "PUT", leader.URL()+"/v1/policies/"+tokens, "", `{"algorithm":"fixed_window","limits":[{"limit":100,"window":"1h"}]}`); r.status/100 != 2 {
			t.Fatalf("put %s: %d %s", tokens, r.status, r.raw)
		}
		f := followers[i%len(followers)]
		if r := do(t, "POST", f.URL()+"/v1/permits", "", `{"policy":"`+jobs+`","client":"u","ttl":"1m"}`); r.status != 201 {
			t.Fatalf("round %d: permit through follower %s right after PUT: %d %s", i, f.ID, r.status, r.raw)
		}
		if r := do(t, "POST", f.URL()+"/v1/reservations", "", `{"keys":[{"policy":"`+tokens+`","client":"u","units":10}]}`); r.status != 201 {
			t.Fatalf("round %d: reservation through follower %s right after PUT: %d %s", i, f.ID, r.status, r.raw)
		}
	}
	f := followers[0]
	if r := do(t, "POST", f.URL()+"/v1/permits", "", `{"policy":"nowhere","client":"u"}`); r.status != 404 || r.body["code"] != "unknown_policy" {
		t.Fatalf("permit of a policy that exists nowhere: %d %s", r.status, r.raw)
	}
	if r := do(t, "POST", f.URL()+"/v1/reservations", "", `{"keys":[{"policy":"nowhere","client":"u","units":1}]}`); r.status != 404 || !strings.HasPrefix(r.body["detail"].(string), "keys[0].policy") {
		t.Fatalf("reservation of a policy that exists nowhere: %d %s", r.status, r.raw)
	}
}

// TestTopListsLivePermits: GET /v1/top counts the permits live per
// concurrency policy (0 for one with none); ?policy= narrows it, and a
// policy that counts hits has no entry.
func TestTopListsLivePermits(t *testing.T) {
	c := apitest.Start(t, 1, clustertest.Options{Policies: []policy.Policy{concurrencyPolicy("jobs", 3), concurrencyPolicy("idle", 1),
		policy.Fixed("fw", 10, time.Minute)}})
	base := c.Leader(5 * time.Second).URL()
	for range 2 {
		if r := do(t, "POST", base+"/v1/permits", "", `{"policy":"jobs","client":"u"}`); r.status != 201 {
			t.Fatalf("acquire: %d %s", r.status, r.raw)
		}
	}
	for query, want := range map[string]string{
		"":             `{"idle":0,"jobs":2}`,
		"?policy=jobs": `{"jobs":2}`,
		"?policy=fw":   `{}`,
	} {
		r := do(t, "GET", base+"/v1/top"+query, "", "")
		got, _ := json.Marshal(r.body["permits"])
		if r.status != 200 || string(got) != want {
			t.Errorf("GET /v1/top%s: %d permits %s, want %s (%s)", query, r.status, got, want, r.raw)
		}
	}
}
