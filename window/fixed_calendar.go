package window

import "time"

// fixed_window aligned to the calendar (FixedWindowCalendar):
// State{A: the start of the period B was counted in, B: count, C: its end}.
// Periods are local days, ISO weeks (from Monday), months or years in the
// limit's zone (Limit.Loc, UTC when nil); the kind is the limit's nominal
// WindowMs (DayMs, WeekMs, MonthMs, YearMs). Each boundary is an exact
// instant in Unix ms that Go's time package computes with integers from
// the zone's rules, so every replica with the same zone data agrees.
//
//	[cur, curEnd) = the period holding now
//	[a, aEnd)     = [A, C) as stored (C <= A: the period holding A)
//	start, end, used = (a, aEnd, B) if now < aEnd, else (cur, curEnd, 0)
//	allowed = used + cost <= L; cost > L is CostExceedsLimit
//	Remaining = max(0, L - count); ResetAt = end; WindowStart = start
//	RetryAfterMs = end - now (refused; >= 1)
//	ExpiresAt = aEnd
//
// The stored end makes a period under way end where it was cut: after a
// change of the policy's zone, each key's current period still ends at its
// old boundary (its count kept until then) and the next one follows the
// new zone. Periods are contiguous and ordered, so now < aEnd means the
// stored period is the one holding now (or one ahead of a clock that ran
// behind, kept until it ends, as the other windows keep theirs).
//
// A period begins at the first instant whose local date is its first day:
// local midnight, or when a DST change skips midnight, the instant the
// clock jumps past it; when a change repeats midnight, the first one.

// Nominal lengths of calendar periods, in ms: what a calendar limit's
// WindowMs says, and what keys' states are matched by across policy
// changes. A month and a year are the Gregorian averages (30.436875 and
// 365.2425 days), lengths no rolling window is allowed to have.
const (
	DayMs   int64 = 86_400_000
	WeekMs  int64 = 7 * DayMs
	MonthMs int64 = 2_629_746_000
	YearMs  int64 = 12 * MonthMs
)

// IsCalendarPeriod reports whether windowMs names a calendar period.
func IsCalendarPeriod(windowMs int64) bool {
	switch windowMs {
	case DayMs, WeekMs, MonthMs, YearMs:
		return true
	}
	return false
}

// CalendarPeriod is the period of the calendar limit l holding now:
// [start, end) in Unix ms. ok is false when l.WindowMs names no period.
func CalendarPeriod(l Limit, now int64) (start, end int64, ok bool) {
	if !IsCalendarPeriod(l.WindowMs) {
		return 0, 0, false
	}
	start, end = calendarBounds(l.WindowMs, l.Loc, clampTime(now))
	return start, end, true
}

// calendarBounds is the period of kind w holding t (clamped), in loc.
func calendarBounds(w int64, loc *time.Location, t int64) (start, end int64) {
	if loc == nil {
		loc = time.UTC
	}
	lt := time.UnixMilli(t).In(loc)
	y, m, d := lt.Date()
	var ny, nm, nd int
	switch w {
	case DayMs:
		ny, nm, nd = y, int(m), d+1
	case WeekMs:
		d -= (int(lt.Weekday()) + 6) % 7 // back to Monday
		ny, nm, nd = y, int(m), d+7
	case MonthMs:
		d, ny, nm, nd = 1, y, int(m)+1, 1
	default: // YearMs
		m, d, ny, nm, nd = time.January, 1, y+1, 1, 1
	}
	start = firstInstantOf(y, int(m), d, loc)
	end = firstInstantOf(ny, nm, nd, loc)
	// A clock set back across midnight shows an earlier date again after
	// the next period began; that stretch belongs to the later period, so
	// periods never overlap and always hold t.
	for end <= t {
		start = end
		switch w {
		case DayMs:
			nd++
		case WeekMs:
			nd += 7
		case MonthMs:
			nm++
		default:
			ny++
		}
		end = firstInstantOf(ny, nm, nd, loc)
	}
	return min(start, t), end
}

// firstInstantOf is the first instant, in Unix ms, whose date in loc is
// the (normalized) date y-m-d or later.
func firstInstantOf(y, m, d int, loc *time.Location) int64 {
	target := time.Date(y, time.Month(m), d, 0, 0, 0, 0, time.UTC)
	midnight := target.Unix() // seconds of the local midnight as if in UTC
	before := func(t time.Time) bool {
		ly, lm, ld := t.In(loc).Date()
		return time.Date(ly, lm, ld, 0, 0, 0, 0, time.UTC).Before(target)
	}
	c := time.Date(y, time.Month(m), d, 0, 0, 0, 0, loc)
	// Forward: Go may pick an instant before a skipped midnight.
	for i := 0; i < 8 && before(c); i++ {
		_, off := c.Zone()
		_, end := c.ZoneBounds()
		if at := time.Unix(midnight-int64(off), 0); at.After(c) && (end.IsZero() || at.Before(end)) {
			c = at
			break
		}
		if end.IsZero() || !end.After(c) {
			break
		}
		c = end
	}
	// Backward: an earlier zone may already show the date (midnight
	// repeated, or skipped and the jump lands past it).
	for i := 0; i < 8; i++ {
		_, off := c.Zone()
		zs, _ := c.ZoneBounds()
		at := time.Unix(midnight-int64(off), 0)
		if zs.IsZero() || at.After(zs) {
			if at.Before(c) {
				c = at
			}
		} else {
			c = zs
		}
		if zs.IsZero() {
			break
		}
		p := zs.Add(-time.Second)
		if before(p) {
			break
		}
		c = p
	}
	return c.UnixMilli()
}

// calendarWindow is the period a hit at now counts in and what it already
// holds: the stored one until it ends, else a fresh one holding now.
func calendarWindow(l Limit, s State, now int64) (start, end, used int64) {
	a, aEnd := storedPeriod(l, s)
	if now < aEnd {
		return a, aEnd, max(s.B, 0)
	}
	cur, curEnd := calendarBounds(l.WindowMs, l.Loc, now)
	return cur, curEnd, 0
}

// storedPeriod is the period a state was counted in: [A, C) as written,
// or for a state without a valid end, the period holding A.
func storedPeriod(l Limit, s State) (start, end int64) {
	a, c := clampTime(s.A), clampTime(s.C)
	if c > a {
		return a, c
	}
	return calendarBounds(l.WindowMs, l.Loc, a)
}

func applyFixedCalendar(l Limit, s State, now, cost int64) (Result, State) {
	if !IsCalendarPeriod(l.WindowMs) {
		return never(l, now), s
	}
	start, end, used := calendarWindow(l, s, now)
	return decideInPeriod(l, s, start, end, used, now, cost, end)
}

func expiresFixedCalendar(l Limit, s State) int64 {
	if !IsCalendarPeriod(l.WindowMs) {
		return -maxInt64 - 1
	}
	_, end := storedPeriod(l, s)
	return neverAfter(end)
}
