package lease

import "time"

// Stamp is one reading of a holder's two clocks, in nanoseconds: Mono on
// the monotonic clock (from an arbitrary origin; it keeps running while a
// process is stopped, descheduled or in GC, but stops while the whole
// machine is suspended) and Wall on the wall clock (which keeps running
// through a suspend, but may be stepped). A deadline is kept on both, and
// a grant is spent only while both readings are before it: whichever
// clock noticed the time that passed ends the grant.
type Stamp struct{ Mono, Wall int64 }

// Add moves both readings by d.
func (s Stamp) Add(d time.Duration) Stamp { return Stamp{s.Mono + int64(d), s.Wall + int64(d)} }

// Before reports whether s is before deadline on both clocks.
func (s Stamp) Before(deadline Stamp) bool { return s.Mono < deadline.Mono && s.Wall < deadline.Wall }

// Clock reads both clocks at once. Tests inject their own.
type Clock interface{ Now() Stamp }

// SystemClock is the process's clocks: time.Now's monotonic reading
// against an origin, and its wall reading.
type SystemClock struct{ base time.Time }

// NewSystemClock starts a SystemClock whose monotonic origin is now.
func NewSystemClock() *SystemClock { return &SystemClock{base: time.Now()} }

// Now reads both clocks from one time.Now.
func (c *SystemClock) Now() Stamp { return c.Of(time.Now()) }

// Of converts a reading of time.Now (which carries both clocks) to a
// Stamp.
func (c *SystemClock) Of(t time.Time) Stamp { return Stamp{int64(t.Sub(c.base)), t.UnixNano()} }

// Until is how long a holder reading s may still spend before deadline:
// the less of what each clock has left. 0 or less: the deadline passed on
// at least one clock.
func (s Stamp) Until(deadline Stamp) time.Duration {
	return time.Duration(min(deadline.Mono-s.Mono, deadline.Wall-s.Wall))
}

// Deadline is when a holder must stop spending a grant, kept on both of
// its clocks: the send instant's two readings plus the time the grant is
// usable for. It is for holders that keep no Clock of their own (a
// program calling the lease API, the quota service's assignment TTL); it
// reads the time.Now() readings it is given, which carry both clocks, so
// a paused process (both clocks ran on) and a suspended machine (only the
// wall clock ran on) find it passed, and a wall clock stepped back cannot
// extend it (the monotonic clock still ends it).
type Deadline struct {
	sent time.Time
	at   Stamp // the deadline, Mono counted from sent
}

// DeadlineAfter is the deadline usable after sent, a time.Now() reading
// taken just before the request was sent.
func DeadlineAfter(sent time.Time, usable time.Duration) Deadline {
	return Deadline{sent: sent, at: Stamp{Mono: int64(usable), Wall: sent.UnixNano() + int64(usable)}}
}

// stamp reads t's two clocks with Mono counted from the deadline's send
// instant (t.Sub uses the monotonic clock when both readings carry it,
// else the wall clock).
func (d Deadline) stamp(t time.Time) Stamp {
	return Stamp{Mono: int64(t.Sub(d.sent)), Wall: t.UnixNano()}
}

// Left is how long the grant may still be spent at now (a time.Now()
// reading): the less of what the monotonic and the wall clock have left;
// 0 or less when either has reached the deadline.
func (d Deadline) Left(now time.Time) time.Duration { return d.stamp(now).Until(d.at) }

// Passed reports whether now (a time.Now() reading) is at or past the
// deadline on either clock: spend nothing then.
func (d Deadline) Passed(now time.Time) bool { return !d.stamp(now).Before(d.at) }

// Wall is the deadline on the wall clock, for logs and display only:
// deciding by it alone would let a stepped clock extend the grant.
func (d Deadline) Wall() time.Time { return time.Unix(0, d.at.Wall) }
