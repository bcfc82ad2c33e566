package main

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/policy"
)

func TestPolicySetFlagsPairInOrder(t *testing.T) {
	var limits, windows, bursts repeated
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Var(&limits, "limit", "")
	fs.Var(&windows, "window", "")
	fs.Var(&bursts, "burst", "")
	if err := fs.Parse([]string{"--limit", "10", "--window", "1s", "--limit", "1000,5", "--window", "24h, 1h", "--burst", "20,1000,5"}); err != nil {
		t.Fatal(err)
	}
	p, err := policyFromFlags("api", "token_bucket", limits, windows, bursts, policy.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Limits) != 3 || p.Limits[1].Limit != 1000 || time.Duration(p.Limits[1].Window) != 24*time.Hour || p.Limits[2].Burst != 5 {
		t.Fatalf("parsed %+v", p)
	}
	for _, tc := range []struct {
		limits, windows, bursts []string
		want                    string
	}{
		{[]string{"10"}, nil, nil, "give each --limit a --window"},
		{[]string{"10", "20"}, []string{"1s", "1m"}, []string{"3"}, "--burst for every limit or for none"},
		{[]string{"ten"}, []string{"1s"}, nil, "--limit \"ten\""},
		{[]string{"10"}, []string{"soon"}, nil, "--window \"soon\""},
		{[]string{"10", "20"}, []string{"1s", "1000ms"}, nil, "limits[1].window"},
	} {
		_, err := policyFromFlags("api", "fixed_window", tc.limits, tc.windows, tc.bursts, policy.Policy{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v %v: %v; want %q", tc.limits, tc.windows, tc.bursts, err, tc.want)
		}
	}
}

// TestPolicySetFlagsCalendarShadow: policy set's --align calendar,
// --timezone and --mode reach the policy, and bad ones are refused naming
// the field before anything is sent.
func TestPolicySetFlagsCalendarShadow(t *testing.T) {
	p, err := policyFromFlags("monthly", "fixed_window", []string{"1000"}, []string{"1mo"}, nil,
		policy.Policy{Consistency: "strict", Align: "calendar", Timezone: "Europe/Berlin", Mode: "shadow"})
	if err != nil || !p.CalendarAligned() || p.Timezone != "Europe/Berlin" || !p.IsShadow() || p.Consistency != "" {
		t.Fatalf("got %+v, %v", p, err)
	}
	if got := limitsText(p); got != "1000/1mo calendar Europe/Berlin shadow" {
		t.Fatalf("limitsText = %q", got)
	}
	for _, tc := range []struct {
		windows []string
		opts    policy.Policy
		want    string
	}{
		{[]string{"1mo"}, policy.Policy{Align: "anchored", Mode: "enforce"}, "set align: calendar"},
		{[]string{"1mo"}, policy.Policy{Align: "calendar", Timezone: "Mars/Olympus"}, "not a known IANA time zone"},
		{[]string{"1h"}, policy.Policy{Align: "calendar"}, "a calendar window is 1d, 1w, 1mo or 1y"},
		{[]string{"1d"}, policy.Policy{Mode: "dry"}, `mode "dry" is unknown`},
	} {
		_, err := policyFromFlags("p", "fixed_window", []string{"10"}, tc.windows, nil, tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %+v: got %v, want an error containing %q", tc.windows, tc.opts, err, tc.want)
		}
	}
}
