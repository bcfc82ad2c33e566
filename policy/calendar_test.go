package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/window"
)

// TestParseCalendarAndShadow reads the new options from a policy file and
// from a PUT body, and checks they reach the window package.
func TestParseCalendarAndShadow(t *testing.T) {
	ps, err := Parse([]byte(`
policies:
  - name: monthly
    algorithm: fixed_window
    align: calendar
    timezone: Europe/Berlin
    mode: shadow
    limits: [{limit: 1000, window: 1mo}, {limit: 100, window: 1d}]
  - {name: yearly, algorithm: fixed_window, align: calendar, limits: [{limit: 5, window: 1y}]}
  - {name: weekly, algorithm: sliding_window, limits: [{limit: 5, window: 1w}], mode: enforce}
`))
	if err != nil {
		t.Fatal(err)
	}
	m := ps[0]
	if !m.CalendarAligned() || m.Timezone != "Europe/Berlin" || !m.IsShadow() || m.Decider() != window.FixedWindowCalendar {
		t.Fatalf("monthly: %+v", m)
	}
	wl := m.WindowLimits()
	if wl[0].WindowMs != window.MonthMs || wl[1].WindowMs != window.DayMs || wl[0].Loc == nil || wl[0].Loc.String() != "Europe/Berlin" {
		t.Fatalf("window limits %+v", wl)
	}
	if got := m.String(); got != "monthly fixed_window 1000/1mo, 100/24h align calendar Europe/Berlin shadow" {
		t.Fatalf("String() = %q", got)
	}
	if ps[1].Limits[0].Window.String() != "1y" || ps[1].WindowLimits()[0].Loc != time.UTC {
		t.Fatalf("yearly: %+v", ps[1])
	}
	if ps[2].Mode != "" || time.Duration(ps[2].Limits[0].Window) != 7*24*time.Hour {
		t.Fatalf("weekly: %+v", ps[2])
	}
	one, err := ParseOne("m", []byte(`{"algorithm":"fixed_window","align":"calendar","timezone":"UTC","limits":[{"limit":3,"window":"1mo"}]}`))
	if err != nil || one.Timezone != "" || one.Limits[0].Window.Milliseconds() != window.MonthMs {
		t.Fatalf("ParseOne: %+v, %v", one, err)
	}
}

// TestValidateCalendarAndShadow: every misuse is refused naming its field.
func TestValidateCalendarAndShadow(t *testing.T) {
	month := Duration(window.MonthMs * int64(time.Millisecond))
	base := Policy{Name: "p", Algorithm: "fixed_window", Limits: []Limit{{Limit: 10, Window: month}}, Align: AlignCalendar}
	if err := base.Validate(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		edit func(*Policy)
		want string
	}{
		{"rolling month", func(p *Policy) { p.Align = "" }, "limits[0].window 1mo is a calendar period: set align: calendar"},
		{"rolling year", func(p *Policy) { p.Align = ""; p.Limits[0].Window = Duration(window.YearMs * int64(time.Millisecond)) }, "1y is a calendar period"},
		{"calendar 1h", func(p *Policy) { p.Limits[0].Window = Duration(time.Hour) }, "limits[0].window 1h: a calendar window is 1d, 1w, 1mo or 1y"},
		{"calendar sliding", func(p *Policy) { p.Algorithm = "sliding_window" }, `align "calendar": only fixed_window`},
		{"unknown zone", func(p *Policy) { p.Timezone = "Europe/Atlantis" }, `timezone "Europe/Atlantis" is not a known IANA time zone`},
		{"Local zone", func(p *Policy) { p.Timezone = "Local" }, `timezone "Local"`},
		{"zone without calendar", func(p *Policy) { p.Align = AlignEpoch; p.Limits[0].Window = Duration(time.Hour); p.Timezone = "UTC" }, "only align calendar has a time zone"},
		{"leased calendar", func(p *Policy) { p.Consistency = Leased }, "leased policy cannot be calendar-aligned"},
		{"leased shadow", func(p *Policy) {
			p.Align = ""
			p.Limits[0].Window = Duration(time.Hour)
			p.Consistency = Leased
			p.Mode = Shadow
		}, "leased policy cannot be in shadow mode"},
		{"unknown mode", func(p *Policy) { p.Mode = "log" }, `mode "log" is unknown: want enforce or shadow`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := base
			p.Limits = []Limit{base.Limits[0]}
			c.edit(&p)
			if err := p.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
	if _, err := ParseWindow("1.5d"); err == nil {
		t.Fatal("1.5d parsed")
	}
}
