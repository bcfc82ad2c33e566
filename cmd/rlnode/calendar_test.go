package main

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// A monthly quota in Berlin through the real binary: set with the CLI,
// spent in the last minute of October, refused until Berlin's midnight
// (Retry-After and resetAt say so), and open again once the leader's
// clock (the --debug-clock-offset hook, moved by /debug/clock-offset)
// passes into November. One node: its only voter is itself, so the
// format gate lets the calendar option through.
func TestCalendarMonthAcrossTheBoundary(t *testing.T) {
	nov := time.Date(2024, 11, 1, 0, 0, 0, 0, time.FixedZone("CET", 3600)).UnixMilli() // Nov 1 00:00 in Berlin
	dec := time.Date(2024, 12, 1, 0, 0, 0, 0, time.FixedZone("CET", 3600)).UnixMilli()
	offset := time.Duration(nov-60_000-time.Now().UnixMilli()) * time.Millisecond // a minute before
	n := proctest.StartNode(t, rlnodeBin, "n1", "--debug-endpoints", "--debug-clock-offset", offset.String())
	proctest.WaitReady(t, n, 20*time.Second)

	out, stderr, code := proctest.Run(t, rlnodeBin, nil, "policy", "set", "monthly", "--addr", n.URL(),
		"--limit", "2", "--window", "1mo", "--align", "calendar", "--timezone", "Europe/Berlin")
	if code != 0 {
		t.Fatalf("policy set: exit %d\n%s%s", code, out, stderr)
	}
	out, stderr, code = proctest.Run(t, rlnodeBin, nil, "policy", "get", "monthly", "--addr", n.URL())
	if code != 0 || !strings.Contains(out, "2/1mo calendar Europe/Berlin") {
		t.Fatalf("policy get: exit %d\n%s%s", code, out, stderr)
	}
	for i := range 2 {
		if r := proctest.MustGet(t, n.URL()+"/check/monthly/u"); r.Status != 200 || r.Num("resetAt") != nov {
			t.Fatalf("hit %d: %d %s; want 200 resetting at %d", i, r.Status, r.Raw, nov)
		}
	}
	r := proctest.MustGet(t, n.URL()+"/check/monthly/u")
	retry, _ := strconv.Atoi(r.Header.Get("Retry-After"))
	if r.Status != 429 || r.Num("resetAt") != nov || retry < 1 || retry > 61 {
		t.Fatalf("third hit: %d Retry-After %q %s; want 429 until Berlin's midnight, within a minute", r.Status, r.Header.Get("Retry-After"), r.Raw)
	}
	// Two minutes on: November in Berlin (23:01 on Oct 31 in UTC).
	moved := offset + 2*time.Minute
	if a, err := proctest.Do("POST", n.URL()+"/debug/clock-offset", "", map[string]int64{"offsetMs": moved.Milliseconds()}); err != nil || a.Status != 200 {
		t.Fatalf("move the clock: %v %+v", err, a)
	}
	proctest.Poll(t, 10*time.Second, func() error {
		r := proctest.MustGet(t, n.URL()+"/check/monthly/u")
		if r.Status != 200 || r.Num("resetAt") != dec || r.Num("remaining") != 1 {
			return fmt.Errorf("after the boundary: %d %s; want 200 with 1 left, resetting Dec 1", r.Status, r.Raw)
		}
		return nil
	})
}
