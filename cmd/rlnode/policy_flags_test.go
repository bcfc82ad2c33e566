package main

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
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
	p, err := policyFromFlags("api", "token_bucket", limits, windows, bursts)
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
		_, err := policyFromFlags("api", "fixed_window", tc.limits, tc.windows, tc.bursts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v %v: %v; want %q", tc.limits, tc.windows, tc.bursts, err, tc.want)
		}
	}
}
