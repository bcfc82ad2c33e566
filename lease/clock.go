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
