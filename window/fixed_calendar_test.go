package window

import (
	"math/rand/v2"
	"testing"
	"time"
	_ "time/tzdata" // the same zone rules wherever the tests run
)

func zone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func ms(t testing.TB, rfc3339 string) int64 {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, rfc3339)
	if err != nil {
		t.Fatal(err)
	}
	return v.UnixMilli()
}

// TestCalendarPeriodBounds pins period boundaries written by hand from the
// calendar and the zones' published rules: leap days, ISO weeks across a
// new year, 23- and 25-hour days, and midnights that DST skips or repeats.
func TestCalendarPeriodBounds(t *testing.T) {
	cases := []struct {
		name, zone string
		w          int64
		now        string
		start, end string
	}{
		{"leap February", "UTC", MonthMs, "2024-02-29T23:59:59.999Z", "2024-02-01T00:00:00Z", "2024-03-01T00:00:00Z"},
		{"common February", "UTC", MonthMs, "2023-02-28T12:00:00Z", "2023-02-01T00:00:00Z", "2023-03-01T00:00:00Z"},
		{"a month's first ms", "UTC", MonthMs, "2024-03-01T00:00:00Z", "2024-03-01T00:00:00Z", "2024-04-01T00:00:00Z"},
		{"December to January", "UTC", MonthMs, "2024-12-31T23:59:59.999Z", "2024-12-01T00:00:00Z", "2025-01-01T00:00:00Z"},
		{"leap year", "UTC", YearMs, "2024-12-31T23:00:00Z", "2024-01-01T00:00:00Z", "2025-01-01T00:00:00Z"},
		{"leap day", "UTC", DayMs, "2024-02-29T10:00:00Z", "2024-02-29T00:00:00Z", "2024-03-01T00:00:00Z"},
		{"ISO week across new year", "UTC", WeekMs, "2024-12-31T08:00:00Z", "2024-12-30T00:00:00Z", "2025-01-06T00:00:00Z"},
		{"ISO week on Sunday", "UTC", WeekMs, "2025-01-05T23:59:59.999Z", "2024-12-30T00:00:00Z", "2025-01-06T00:00:00Z"},
		{"ISO week on Monday", "UTC", WeekMs, "2025-01-06T00:00:00Z", "2025-01-06T00:00:00Z", "2025-01-13T00:00:00Z"},
		{"Berlin 23-hour day", "Europe/Berlin", DayMs, "2024-03-31T12:00:00Z", "2024-03-30T23:00:00Z", "2024-03-31T22:00:00Z"},
		{"Berlin 25-hour day", "Europe/Berlin", DayMs, "2024-10-27T12:00:00Z", "2024-10-26T22:00:00Z", "2024-10-27T23:00:00Z"},
		{"Berlin October", "Europe/Berlin", MonthMs, "2024-10-15T00:00:00Z", "2024-09-30T22:00:00Z", "2024-10-31T23:00:00Z"},
		{"Berlin: UTC's new month is still the old one", "Europe/Berlin", MonthMs, "2024-10-31T23:30:00Z", "2024-10-31T23:00:00Z", "2024-11-30T23:00:00Z"},
		{"Berlin year", "Europe/Berlin", YearMs, "2024-06-01T00:00:00Z", "2023-12-31T23:00:00Z", "2024-12-31T23:00:00Z"},
		{"New York week over DST", "America/New_York", WeekMs, "2024-03-10T12:00:00Z", "2024-03-04T05:00:00Z", "2024-03-11T04:00:00Z"},
		{"Sao Paulo: DST skips midnight", "America/Sao_Paulo", DayMs, "2018-11-04T12:00:00Z", "2018-11-04T03:00:00Z", "2018-11-05T02:00:00Z"},
		{"Sao Paulo: the day before", "America/Sao_Paulo", DayMs, "2018-11-04T02:59:59.999Z", "2018-11-03T03:00:00Z", "2018-11-04T03:00:00Z"},
		{"Havana: midnight repeated, the first one", "America/Havana", DayMs, "2018-11-04T04:30:00Z", "2018-11-04T04:00:00Z", "2018-11-05T05:00:00Z"},
		{"Havana: the repeated hour is the new day", "America/Havana", DayMs, "2018-11-04T05:30:00Z", "2018-11-04T04:00:00Z", "2018-11-05T05:00:00Z"},
		{"Havana: midnight skipped", "America/Havana", DayMs, "2018-03-11T06:00:00Z", "2018-03-11T05:00:00Z", "2018-03-12T04:00:00Z"},
		{"Kathmandu +05:45 month", "Asia/Kathmandu", MonthMs, "2024-01-01T00:00:00Z", "2023-12-31T18:15:00Z", "2024-01-31T18:15:00Z"},
		{"at the epoch", "UTC", DayMs, "1970-01-01T00:00:00Z", "1970-01-01T00:00:00Z", "1970-01-02T00:00:00Z"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := Limit{Limit: 1, WindowMs: c.w, Loc: zone(t, c.zone)}
			start, end, ok := CalendarPeriod(l, ms(t, c.now))
			if !ok || start != ms(t, c.start) || end != ms(t, c.end) {
				t.Fatalf("period of %s = [%s, %s), want [%s, %s)", c.now,
					time.UnixMilli(start).UTC().Format(time.RFC3339), time.UnixMilli(end).UTC().Format(time.RFC3339), c.start, c.end)
			}
		})
	}
}

func TestFixedWindowCalendarTable(t *testing.T) {
	berlin := zone(t, "Europe/Berlin")
	feb, mar, apr := ms(t, "2024-02-01T00:00:00Z"), ms(t, "2024-03-01T00:00:00Z"), ms(t, "2024-04-01T00:00:00Z")
	l := Limit{Limit: 10, WindowMs: MonthMs}
	cases := []struct {
		name      string
		l         Limit
		s         State
		now, cost int64
		want      Outcome
		wantState State // for Allowed only
		remaining int64
		resetAt   int64
		retry     int64
		start     int64
	}{
		{"never seen counts in the month now falls in", l, State{}, feb + 5*DayMs, 1, Allowed, State{feb, 1, mar}, 9, mar, 0, feb},
		{"same month adds up", l, State{feb, 3, mar}, mar - 1, 2, Allowed, State{feb, 5, mar}, 5, mar, 0, feb},
		{"refused until the month ends (leap day included)", l, State{feb, 10, mar}, feb + 28*DayMs, 1, Refused, State{}, 0, mar, DayMs, feb},
		{"refused 1 ms before the boundary", l, State{feb, 10, mar}, mar - 1, 1, Refused, State{}, 0, mar, 1, feb},
		{"the next month starts empty on the boundary", l, State{feb, 10, mar}, mar, 1, Allowed, State{mar, 1, apr}, 9, apr, 0, mar},
		{"a stored instant is read as its month", l, State{feb + 7, 10, 0}, feb + 9, 1, Refused, State{}, 0, mar, mar - feb - 9, feb},
		{"cost above limit is never allowed", l, State{feb, 2, 0}, feb + 1, 11, CostExceedsLimit, State{}, 8, mar, -1, feb},
		{"a lowered limit refuses until the month ends", l, State{feb, 25, 0}, feb + 1, 1, Refused, State{}, 0, mar, mar - feb - 1, feb},
		{"a state ahead of the clock keeps its month", l, State{mar, 10, 0}, mar - 10, 1, Refused, State{}, 0, apr, apr - mar + 10, mar},
		{"Berlin: 23:30 UTC on Oct 31 is November", Limit{Limit: 10, WindowMs: MonthMs, Loc: berlin}, State{ms(t, "2024-09-30T22:00:00Z"), 10, 0},
			ms(t, "2024-10-31T23:30:00Z"), 1, Allowed, State{ms(t, "2024-10-31T23:00:00Z"), 1, ms(t, "2024-11-30T23:00:00Z")}, 9, ms(t, "2024-11-30T23:00:00Z"), 0, ms(t, "2024-10-31T23:00:00Z")},
		{"a state without its end is read as the period holding A", l, State{feb + 7, 3, 0}, feb + 9, 1, Allowed, State{feb, 4, mar}, 6, mar, 0, feb},
		{"a period cut in another zone ends where it was cut", l, State{ms(t, "2024-02-01T05:00:00Z"), 10, ms(t, "2024-03-01T05:00:00Z")},
			mar + 1, 1, Refused, State{}, 0, ms(t, "2024-03-01T05:00:00Z"), ms(t, "2024-03-01T05:00:00Z") - mar - 1, ms(t, "2024-02-01T05:00:00Z")},
		{"then the new zone's period starts", l, State{ms(t, "2024-02-01T05:00:00Z"), 10, ms(t, "2024-03-01T05:00:00Z")},
			ms(t, "2024-03-01T05:00:00Z"), 1, Allowed, State{mar, 1, apr}, 9, apr, 0, mar},
		{"not a period length allows nothing", Limit{Limit: 10, WindowMs: 60_000}, State{}, feb, 1, CostExceedsLimit, State{}, 0, feb, -1, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, ns := checkApply(t, FixedWindowCalendar, c.l, c.s, c.now, c.cost, c.s.A <= c.now)
			if c.want != Allowed {
				c.wantState = c.s
			}
			if r.Outcome != c.want || ns != c.wantState || r.Remaining != c.remaining || r.ResetAt != c.resetAt ||
				r.RetryAfterMs != c.retry || r.WindowStart != c.start || r.Limit != 10 || r.WindowMs != c.l.WindowMs {
				t.Fatalf("got %+v state %+v; want %v state %+v remaining %d resetAt %d retry %d start %d",
					r, ns, c.want, c.wantState, c.remaining, c.resetAt, c.retry, c.start)
			}
		})
	}
}

// calendarOracle names the period an instant falls in from the local date
// alone (time's Date and ISOWeek), and finds the next period's first
// instant by bisection: none of the implementation's boundary arithmetic.
type calendarOracle struct {
	w   int64
	loc *time.Location
}

func (o calendarOracle) key(t int64) [2]int {
	lt := time.UnixMilli(t).In(o.loc)
	switch o.w {
	case DayMs:
		return [2]int{lt.Year(), lt.YearDay()}
	case WeekMs:
		y, wk := lt.ISOWeek()
		return [2]int{y, wk}
	case MonthMs:
		return [2]int{lt.Year(), int(lt.Month())}
	}
	return [2]int{lt.Year(), 0}
}

// next is the first instant after t in another period (periods in the
// zones tested are contiguous).
func (o calendarOracle) next(t int64) int64 {
	k := o.key(t)
	lo, hi := t, t+400*DayMs // lo in k's period, hi past it
	for hi-lo > 1 {
		if mid := lo + (hi-lo)/2; o.key(mid) == k {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// TestFixedWindowCalendarMatchesOracle drives random keys through Apply
// and through the oracle, keeping the allowed cost per period: same
// outcome, remaining, reset and wait, in zones with DST (skipped and
// repeated midnights included) and over leap years.
func TestFixedWindowCalendarMatchesOracle(t *testing.T) {
	zones := []string{"UTC", "Europe/Berlin", "America/New_York", "America/Sao_Paulo", "Australia/Lord_Howe", "Asia/Kathmandu", "Pacific/Apia"}
	periods := []int64{DayMs, WeekMs, MonthMs, YearMs}
	r := rand.New(rand.NewPCG(29, 1))
	from, to := ms(t, "2011-06-01T00:00:00Z"), ms(t, "2030-01-01T00:00:00Z")
	for run := 0; run < 160; run++ {
		o := calendarOracle{w: periods[r.IntN(len(periods))], loc: zone(t, zones[r.IntN(len(zones))])}
		limit := 1 + r.Int64N(10)
		l := Limit{Limit: limit, WindowMs: o.w, Loc: o.loc}
		used := map[[2]int]int64{}
		var s State
		now := from + r.Int64N(to-from)
		for i := 0; i < 60; i++ {
			now += r.Int64N(o.w / 6)
			cost := r.Int64N(limit + 2)
			res, ns := checkApply(t, FixedWindowCalendar, l, s, now, cost, true)
			k, c, reset := o.key(now), max(cost, 1), o.next(now)
			want, retry := Refused, reset-now
			switch {
			case c > limit:
				want, retry = CostExceedsLimit, -1
			case used[k]+c <= limit:
				want, retry = Allowed, 0
				used[k] += c
			}
			if res.Outcome != want || res.Remaining != max(0, limit-used[k]) || res.ResetAt != reset || res.RetryAfterMs != retry {
				t.Fatalf("%s w=%d limit=%d now=%s cost=%d: got %+v; oracle %v, used %d, reset %s, retry %d", o.loc, o.w, limit,
					time.UnixMilli(now).In(o.loc), cost, res, want, used[k], time.UnixMilli(reset).In(o.loc), retry)
			}
			s = ns
		}
	}
}

// FuzzFixedWindowCalendar: no input panics or wraps and the invariants
// hold; waits are exact for stored states not after now.
func FuzzFixedWindowCalendar(f *testing.F) {
	f.Add(int64(10), uint8(2), uint8(1), int64(1_000), int64(10), int64(1_500), int64(1))
	f.Add(int64(-1), uint8(255), uint8(255), int64(-1<<63), int64(-1<<63), int64(-1<<63), int64(-1<<63))
	f.Add(int64(1<<63-1), uint8(3), uint8(4), int64(1<<63-1), int64(1<<63-1), int64(1<<63-1), int64(1<<63-1))
	zones := []*time.Location{nil, zone(f, "Europe/Berlin"), zone(f, "America/Havana"), zone(f, "America/Sao_Paulo"), zone(f, "Pacific/Kiritimati")}
	periods := []int64{DayMs, WeekMs, MonthMs, YearMs}
	f.Fuzz(func(t *testing.T, limit int64, period, z uint8, a, b, now, cost int64) {
		l := Limit{Limit: limit, WindowMs: periods[int(period)%4], Loc: zones[int(z)%len(zones)]}
		checkApply(t, FixedWindowCalendar, l, State{A: a, B: b}, now, cost, a >= 0 && a <= clampTime(now))
		checkApply(t, FixedWindowCalendar, l, State{A: a, B: b, C: b}, now, cost, false)
		l.Limit = 1 + small(limit, 50)
		now = 1<<40 + small(now, 1<<40)
		s := State{A: now - small(a, 2*l.WindowMs), B: small(b, 60)}
		r, _ := checkApply(t, FixedWindowCalendar, l, s, now, small(cost, 55), true)
		if start, end, _ := CalendarPeriod(l, now); start > now || end <= now || r.ResetAt < end {
			t.Fatalf("period [%d, %d) of %d, reset %d", start, end, now, r.ResetAt)
		}
	})
}

// TestCalendarRefund: units come back only to the period they were
// counted in (a settle or a negative hit), never below zero, and nothing
// once the period is over.
func TestCalendarRefund(t *testing.T) {
	l := Limit{Limit: 10, WindowMs: MonthMs, Loc: zone(t, "Europe/Berlin")}
	oct, nov := ms(t, "2024-09-30T22:00:00Z"), ms(t, "2024-10-31T23:00:00Z")
	s := State{A: oct, B: 7, C: nov}
	if got := Refund(FixedWindowCalendar, l, s, nov-1, oct, 3); got != (State{A: oct, B: 4, C: nov}) {
		t.Fatalf("refund in October: %+v", got)
	}
	if got := RefundCurrent(FixedWindowCalendar, l, s, nov-1, 9); got != (State{A: oct, B: 0, C: nov}) {
		t.Fatalf("negative hit in October: %+v, want 0, never below", got)
	}
	for _, now := range []int64{nov, nov + DayMs} {
		if got := Refund(FixedWindowCalendar, l, s, now, oct, 3); got != s {
			t.Fatalf("refund at %d (November): %+v, want unchanged", now, got)
		}
		if got := RefundCurrent(FixedWindowCalendar, l, s, now, 3); got != s {
			t.Fatalf("negative hit at %d (November): %+v, want unchanged", now, got)
		}
	}
	if got := Refund(FixedWindowCalendar, l, s, nov-1, oct+1, 3); got != s {
		t.Fatalf("refund naming another start: %+v", got)
	}
}
