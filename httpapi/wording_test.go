package httpapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/httpapi/apitest"
	"github.com/rlnode/rlnode/policy"
)

// The refusals below say what happened and what to do, in words a caller
// can act on; each case is a sentence a user once met without its hint.

// TestUpgradeRefusalSaysWhatWasNotMade: a reservation or a permit refused
// while the cluster is being upgraded is not a hit; its answer says what
// was not made, never "the hit was not counted".
func TestUpgradeRefusalSaysWhatWasNotMade(t *testing.T) {
	// Voters of the previous release (format 3): no concurrency policy can
	// be made, so the permit is asked to renew (refused before the log
	// all the same).
	c := apitest.Start(t, 3, clustertest.Options{Policies: []policy.Policy{policy.Fixed("fw", 10, time.Minute)},
		Formats: map[string]fsm.Format{"n1": fsm.FormatR3, "n2": fsm.FormatR3, "n3": fsm.FormatR3}})
	leader := c.Leader(5 * time.Second)
	for _, n := range append(c.Followers(leader), leader) { // forwarded, and on the leader itself
		for path, w := range map[string]struct{ body, says string }{
			"/v1/reservations": {`{"policy":"fw","client":"u","units":1}`, "the reservation was not made"},
			"/v1/permits/" + strings.Repeat("a", 32) + "/renew": {`{"ttl":"1s"}`, "the permit was not renewed"},
		} {
			r := do(t, "POST", n.URL()+path, "", w.body)
			detail, _ := r.body["detail"].(string)
			if r.status != 409 || r.body["code"] != "cluster_upgrading" || !strings.Contains(detail, w.says) ||
				strings.Contains(detail, "hit") || !strings.Contains(detail, "upgrade them first") {
				t.Errorf("POST %s through %s on a cluster being upgraded: %d %s; want 409 cluster_upgrading saying %q and what to do, and no word of a hit", path, n.ID, r.status, r.raw, w.says)
			}
		}
	}
}

// TestSettleOfAnExpiredReservationSaysTheUnitsStayedCharged: a settle
// after the reservation's TTL finds nothing to settle; the 404 says that
// the reserved units stayed charged in full (as they did) and how to
// avoid it, not only "no such reservation".
func TestSettleOfAnExpiredReservationSaysTheUnitsStayedCharged(t *testing.T) {
	c := apitest.Start(t, 1, clustertest.Options{Policies: []policy.Policy{policy.Fixed("tok", 100, time.Hour)}})
	base := c.Leader(5 * time.Second).URL()
	r := do(t, "POST", base+"/v1/reservations", "tok", `{"policy":"tok","client":"team","units":40,"ttl":"1s"}`)
	if r.status != 201 {
		t.Fatalf("reserve: %d %s", r.status, r.raw)
	}
	id := r.body["reservation"].(string)
	time.Sleep(1500 * time.Millisecond) // past the TTL, in cluster time too
	s := do(t, "POST", base+"/v1/reservations/"+id+"/settle", "tok", `{"units":10}`)
	detail, _ := s.body["detail"].(string)
	if s.status != 404 || !strings.Contains(detail, "stayed charged in full") || !strings.Contains(detail, "longer ttl") {
		t.Fatalf("settle after the TTL: %d %s; want 404 saying the units stayed charged in full and what to do", s.status, s.raw)
	}
	if st := do(t, "GET", base+"/v1/status/tok/team", "", ""); st.body["used"] != 40.0 {
		t.Fatalf("the key after the late settle: %s; want the 40 reserved still used", st.raw)
	}
}

// TestLeaseOfAPolicyThatCannotBeLeasedHintsWhatCan: the lease API's 409
// suggests consistency: leased only for a policy that can take it; a
// concurrency policy is told to take permits instead.
func TestLeaseOfAPolicyThatCannotBeLeasedHintsWhatCan(t *testing.T) {
	cal := policy.Fixed("monthly", 1000, 0)
	cal.Limits[0].Window, _ = policy.ParseWindow("1mo")
	cal.Align = policy.AlignCalendar
	c := apitest.Start(t, 1, clustertest.Options{Policies: []policy.Policy{concurrencyPolicy("jobs", 2), cal, policy.Fixed("fw", 10, time.Minute)}})
	base := c.Leader(5 * time.Second).URL()
	for name, want := range map[string]struct{ says, never string }{
		"jobs":    {"POST /v1/permits", "consistency: leased"},
		"monthly": {"cannot be leased", "set consistency: leased"},
		"fw":      {"set consistency: leased", "permits"},
	} {
		r := do(t, "POST", base+"/v1/leases", "", `{"policy":"`+name+`","client":"u","holder":"h","want":1}`)
		detail, _ := r.body["detail"].(string)
		if r.status != 409 || r.body["code"] != "not_leased" || !strings.Contains(detail, want.says) || strings.Contains(detail, want.never) {
			t.Errorf("lease of %s: %d %s; want 409 not_leased saying %q and never %q", name, r.status, r.raw, want.says, want.never)
		}
	}
}

// TestTopCountsAnAllOrNothingRefusalOnce: a check of several keys refused
// by one of them (as an Envoy request with several descriptors is) is one
// refusal in the top keys, of the key that refused it; the keys that had
// room are not listed as refused.
func TestTopCountsAnAllOrNothingRefusalOnce(t *testing.T) {
	c := apitest.Start(t, 1, clustertest.Options{Policies: []policy.Policy{policy.Fixed("small", 1, time.Hour), policy.Fixed("big", 100, time.Hour)}})
	base := c.Leader(5 * time.Second).URL()
	if r := do(t, "GET", base+"/check/small/x", "", ""); r.status != 200 {
		t.Fatalf("first hit: %d %s", r.status, r.raw)
	}
	body := `{"hits":[{"policy":"big","client":"y"},{"policy":"big","client":"z"},{"policy":"small","client":"x"}]}`
	if r := do(t, "POST", base+"/v1/check", "", body); r.status != 429 {
		t.Fatalf("the check small/x refuses: %d %s", r.status, r.raw)
	}
	r := do(t, "GET", base+"/v1/top?by=refused", "", "")
	refused := map[string]any{}
	for _, p := range r.body["policies"].([]any) {
		p := p.(map[string]any)
		refused[p["policy"].(string)] = p["refused"]
	}
	if refused["small"] != 1.0 || (refused["big"] != nil && refused["big"] != 0.0) {
		t.Fatalf("top after one check refused by small/x: refused by policy %v; want small 1 and big none (%s)", refused, r.raw)
	}
}
