package fsm

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/rlnode/rlnode/policy"
	"github.com/rlnode/rlnode/window"
)

func utcMs(t *testing.T, s string) int64 {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v.UnixMilli()
}

func monthly(limit int64, zone string) policy.Policy {
	p := pol("monthly", "fixed_window", policy.Limit{Limit: limit, Window: policy.Duration(window.MonthMs * int64(time.Millisecond))})
	p.Align, p.Timezone = policy.AlignCalendar, zone
	return p
}

// TestCalendarMonth: a Berlin month resets at Berlin's midnight on the
// 1st, raising the limit mid-month keeps the month's usage, and the count
// survives a snapshot.
func TestCalendarMonth(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(monthly(3, "Europe/Berlin"))
	oct, nov := utcMs(t, "2024-10-15T12:00:00Z"), utcMs(t, "2024-10-31T23:00:00Z") // Nov 1 00:00 CET
	for i := range 3 {
		if r := tf.check(oct+int64(i), nil, h2("monthly", "u", 1)).Hits[0]; r.Outcome != window.Allowed || r.Parts[0].ResetAt != nov {
			t.Fatalf("hit %d: %+v, want allowed until %d", i, r, nov)
		}
	}
	if r := tf.check(oct+10, nil, h2("monthly", "u", 1)).Hits[0]; r.Outcome != window.Refused || r.Parts[0].RetryAfterMs != nov-oct-10 {
		t.Fatalf("4th hit: %+v, want refused until Nov 1 in Berlin", r)
	}
	if ch := tf.set(monthly(5, "Europe/Berlin")).Changes[0]; ch != "changed" {
		t.Fatalf("raising the limit: %q", ch)
	}
	if r := tf.check(oct+20, nil, h2("monthly", "u", 1)).Hits[0]; r.Outcome != window.Allowed || r.Parts[0].Remaining != 1 {
		t.Fatalf("after raising to 5: %+v, want allowed with 1 left (the month's 3 hits kept)", r)
	}
	c := newTestFSM(t)
	if err := c.f.Restore(io.NopCloser(bytes.NewReader(persistSnapshot(t, tf.f).Bytes()))); err != nil {
		t.Fatal(err)
	}
	for _, f := range []*testFSM{tf, c} {
		if r := f.check(nov-1, nil, h2("monthly", "u", 2)).Hits[0]; r.Outcome != window.Refused {
			t.Fatalf("last ms of October: %+v, want refused (4 of 5 used)", r)
		}
		if r := f.check(nov, nil, h2("monthly", "u", 5)).Hits[0]; r.Outcome != window.Allowed || r.Parts[0].WindowStart != nov ||
			r.Parts[0].ResetAt != utcMs(t, "2024-11-30T23:00:00Z") {
			t.Fatalf("Nov 1 in Berlin: %+v, want a fresh month", r)
		}
	}
}

// TestShadowCountsButNeverRefuses: a shadow policy's refusal is answered
// allowed and marked WouldRefuse, changes nothing (the state is what
// enforcing would have left), and never fails its group.
func TestShadowCountsButNeverRefuses(t *testing.T) {
	tf := newTestFSM(t)
	sh := pol("sh", "fixed_window", lim(2, time.Minute), lim(100, time.Hour))
	sh.Mode = policy.Shadow
	tf.set(sh, pol("org", "fixed_window", lim(1, time.Minute)))
	for i := range 2 {
		if r := tf.check(t0+int64(i), nil, h2("sh", "u", 1)).Hits[0]; r.Outcome != window.Allowed || r.WouldRefuse {
			t.Fatalf("hit %d: %+v", i, r)
		}
	}
	r := tf.check(t0+2, nil, h2("sh", "u", 1)).Hits[0]
	if r.Outcome != window.Allowed || !r.WouldRefuse || !r.Counted || r.Parts[0].Outcome != window.Refused ||
		r.Parts[0].RetryAfterMs != 60_000-2 || r.Parts[1].Remaining != 98 {
		t.Fatalf("3rd hit: %+v, want allowed, would refuse (retry in 59998 ms), the hour's 98 left untouched", r)
	}
	// A cost no limit allows would refuse too.
	if r := tf.check(t0+3, nil, h2("sh", "v", 3)).Hits[0]; r.Outcome != window.Allowed || !r.WouldRefuse || r.Parts[0].Outcome != window.CostExceedsLimit {
		t.Fatalf("cost 3: %+v", r)
	}
	// With another policy: the shadow refusal does not fail the group, the
	// other hit counts.
	res := tf.check(t0+4, []int{2}, h2("sh", "u", 1), h2("org", "o", 1))
	if g := res.Hits; !g[0].WouldRefuse || g[1].Outcome != window.Allowed || !g[1].Counted || g[0].Parts[1].Remaining != 98 {
		t.Fatalf("group: %+v", g)
	}
	// The enforcing hit refused fails the group; the shadow hit's hour
	// limit reports its room once, not twice.
	res = tf.check(t0+5, []int{2}, h2("sh", "u", 1), h2("org", "o", 1))
	if g := res.Hits; g[0].Counted || !g[0].WouldRefuse || g[1].Outcome != window.Refused || g[0].Parts[1].Remaining != 98 {
		t.Fatalf("refused group: %+v", g)
	}
	// Enforcing now: the window is exactly where enforcement would have it.
	sh.Mode = ""
	tf.set(sh)
	if r := tf.check(t0+6, nil, h2("sh", "u", 1)).Hits[0]; r.Outcome != window.Refused || r.WouldRefuse {
		t.Fatalf("enforcing: %+v, want refused (2 of 2 used)", r)
	}
}

// TestCalendarShadowOptionsRoundTripAndNeedR4: the new options survive the
// codec, an older node halts on their bits (so PolicyFormat must keep them
// off the log until every voter is R4), and other policies stay R3.
func TestCalendarShadowOptionsRoundTripAndNeedR4(t *testing.T) {
	p := monthly(10, "America/New_York")
	p.Mode = policy.Shadow
	_, out, err := decodeSetPolicies(EncodeSetPolicies(SetUpsert, []policy.Policy{p}))
	if err != nil || len(out) != 1 || !out[0].Equal(p) || out[0].Timezone != "America/New_York" {
		t.Fatalf("round trip: %+v %v", out, err)
	}
	utc := monthly(10, "")
	if _, out, err := decodeSetPolicies(EncodeSetPolicies(SetUpsert, []policy.Policy{utc})); err != nil || !out[0].Equal(utc) {
		t.Fatalf("UTC round trip: %+v %v", out, err)
	}
	sh := pol("s", "token_bucket", lim(1, time.Second))
	sh.Mode = policy.Shadow
	for _, q := range []policy.Policy{p, utc, sh} {
		if f := PolicyFormat(q); f != FormatR4 {
			t.Errorf("PolicyFormat(%v) = %d, want R4", q, f)
		}
	}
	plain := pol("e", "fixed_window", lim(1, time.Second))
	plain.Align = policy.AlignEpoch
	if f := PoliciesFormat([]policy.Policy{plain}); f != FormatR3 {
		t.Errorf("an epoch policy needs %d, want R3", f)
	}
}

// TestShadowPolicyCannotBeReserved: a reservation charges all or nothing
// and a settle gives part back; a shadow policy's would-refuse charges
// nothing, so reserving from one is refused and nothing is held.
func TestShadowPolicyCannotBeReserved(t *testing.T) {
	tf := newTestFSM(t)
	sh := pol("sh", "fixed_window", lim(2, time.Minute))
	sh.Mode = policy.Shadow
	tf.set(sh, pol("org", "fixed_window", lim(100, time.Minute)))
	r := tf.reserve(t0, 1, "app", 30_000, ReserveItem{Policy: "org", Client: "o", Units: 5}, ReserveItem{Policy: "sh", Client: "u", Units: 5})
	if r.Reserved || r.Reason != ReasonShadow || r.Item != 1 {
		t.Fatalf("reserve: %+v, want refused naming item 1 as shadow", r)
	}
	if h := tf.check(t0+1, nil, h2("org", "o", 1)).Hits[0]; h.Parts[0].Remaining != 99 {
		t.Fatalf("org after the refused reservation: %+v, want nothing held", h)
	}
}

// TestCalendarZoneChangeKeepsThePeriod: moving a calendar policy to
// another zone keeps each key's count until its period ends where it was
// cut; the next period follows the new zone.
func TestCalendarZoneChangeKeepsThePeriod(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(monthly(2, "Europe/Berlin"))
	oct, berlinNov := utcMs(t, "2024-10-15T12:00:00Z"), utcMs(t, "2024-10-31T23:00:00Z")
	tf.check(oct, nil, h2("monthly", "u", 2))
	tf.set(monthly(2, "America/New_York"))
	if r := tf.check(oct+1, nil, h2("monthly", "u", 1)).Hits[0]; r.Outcome != window.Refused || r.Parts[0].ResetAt != berlinNov {
		t.Fatalf("after the zone change: %+v, want refused until Berlin's Nov 1 (the period as cut)", r)
	}
	r := tf.check(berlinNov, nil, h2("monthly", "u", 1)).Hits[0]
	if nyNov := utcMs(t, "2024-11-01T04:00:00Z"); r.Outcome != window.Allowed || r.Parts[0].ResetAt != nyNov {
		t.Fatalf("at Berlin's boundary: %+v, want a New York period ending at %d", r, nyNov)
	}
}
