package lease

import (
	"testing"
	"time"
)

// A deadline ends when either clock reaches it: each case moves the
// holder's clocks as one kind of event does and asks the deadline.
func TestDeadlineEndsOnEitherClock(t *testing.T) {
	const usable = time.Second
	sent := Stamp{Mono: 0, Wall: 1_700_000_000e9}
	d := Deadline{at: Stamp{Mono: int64(usable), Wall: sent.Wall + int64(usable)}}
	cases := []struct {
		name   string
		now    Stamp
		passed bool
	}{
		{"just sent", sent, false},
		{"100 ms later on both", sent.Add(100 * time.Millisecond), false},
		{"a process paused past the lease (both clocks ran on)", sent.Add(2 * time.Second), true},
		{"a machine suspended past the lease (only the wall clock ran on)", Stamp{Mono: sent.Mono + int64(10*time.Millisecond), Wall: sent.Wall + int64(2*time.Second)}, true},
		{"the wall clock stepped back an hour, the monotonic clock past the lease", Stamp{Mono: sent.Mono + int64(1100*time.Millisecond), Wall: sent.Wall - int64(time.Hour)}, true},
		{"the wall clock stepped forward past the deadline", Stamp{Mono: sent.Mono + int64(time.Millisecond), Wall: sent.Wall + int64(5*time.Second)}, true},
		{"exactly at the deadline", sent.Add(usable), true},
	}
	for _, c := range cases {
		left := c.now.Until(d.at)
		if passed := !c.now.Before(d.at); passed != c.passed || (left <= 0) != c.passed {
			t.Errorf("%s: passed %v, left %v; want passed %v", c.name, passed, left, c.passed)
		}
	}
	if left := sent.Add(100 * time.Millisecond).Until(d.at); left != 900*time.Millisecond {
		t.Errorf("left after 100 ms: %v, want 900ms", left)
	}
	if left := (Stamp{Mono: sent.Mono + int64(300*time.Millisecond), Wall: sent.Wall + int64(600*time.Millisecond)}).Until(d.at); left != 400*time.Millisecond {
		t.Errorf("left with the wall clock 300 ms ahead of the monotonic: %v, want the less, 400ms", left)
	}
}

// The same through time.Now() readings, as a program holding a grant sees
// it.
func TestDeadlineAfterReadsTimeNow(t *testing.T) {
	now := time.Now()
	d := DeadlineAfter(now, time.Second)
	if left := d.Left(now); left != time.Second || d.Passed(now) {
		t.Fatalf("at the send instant: left %v, passed %v", left, d.Passed(now))
	}
	if !d.Passed(now.Add(time.Second)) || d.Passed(now.Add(999*time.Millisecond)) {
		t.Fatal("the deadline is not sent + usable")
	}
	// Sent two seconds ago, usable for one: a holder paused in between
	// wakes up to a passed deadline.
	if paused := DeadlineAfter(time.Now().Add(-2*time.Second), time.Second); !paused.Passed(time.Now()) || paused.Left(time.Now()) > -time.Second+time.Millisecond*100 {
		t.Fatalf("sent 2 s ago for 1 s: passed %v, left %v", paused.Passed(time.Now()), paused.Left(time.Now()))
	}
	// A reading with no monotonic clock (decoded, or Round(0)) is read on
	// the wall clock alone.
	if !d.Passed(now.Round(0).Add(5 * time.Second)) {
		t.Fatal("a wall reading 5 s on did not end the deadline")
	}
	if got := d.Wall(); !got.Equal(now.Round(0).Add(time.Second)) {
		t.Fatalf("Wall() = %v, want %v", got, now.Round(0).Add(time.Second))
	}
}
