// Package policy owns rlnode's Policy type: a named budget with an
// algorithm and one or more limits, its validation (messages name the field
// at fault) and reading policies from YAML or JSON.
package policy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rlnode/rlnode/window"
)

// Default is the policy GET /check/:client uses, and the one --limit and
// --window seed. It is spelled here and nowhere else.
const Default = "default"

// Bounds a policy must stay within. MaxLimit is what the window package's
// arithmetic is proven for.
const (
	MaxNameLen = 64
	MaxLimits  = 8
	MaxLimit   = 1 << 40
	MaxWindow  = 366 * 24 * time.Hour
	// MaxConcurrency bounds a concurrency policy's limit: every live permit
	// is stored, so the bound is on memory, not arithmetic.
	MaxConcurrency = 100_000
)

// Policy is a named budget. Every limit must allow a hit for it to pass.
type Policy struct {
	Name      string  `json:"name"`
	Algorithm string  `json:"algorithm"`
	Limits    []Limit `json:"limits"`
	// Envoy, when set, says which envoyproxy/ratelimit descriptor this
	// policy answers for (rlnode policy import-envoy); the gRPC rate limit
	// service matches requests against it.
	Envoy *Envoy `json:"envoy,omitempty"`
	// Consistency is "" (strict, the default: every hit through the log)
	// or "leased" (nodes and applications spend budget granted through the
	// log; never over the limit, not linearizable).
	Consistency string `json:"consistency,omitempty"`
	// Align is "" (windows anchored at each key's first hit, the default)
	// or "epoch" (fixed windows at multiples of the window length since the
	// Unix epoch, as envoyproxy/ratelimit and most Redis limiters count).
	Align string `json:"align,omitempty"`
	// Timezone is a calendar policy's IANA zone ("Europe/Berlin"); empty
	// is UTC. Only align "calendar" has one.
	Timezone string `json:"timezone,omitempty"`
	// Mode is "" (enforce, the default) or "shadow": hits count as usual
	// but a hit that would be refused is answered as allowed, marked
	// would-refuse.
	Mode string `json:"mode,omitempty"`
	// Scope is "" (this cluster's own budget) or "global": one budget
	// shared by regional clusters, which lease slices of it from this
	// cluster (scope.go; docs/multi-region.md).
	Scope string `json:"scope,omitempty"`
	// Mirrored marks a region's copy of its parent's global policy: the
	// region decides its keys only from slices of the parent's budget.
	// Only the region's own holder writes it.
	Mirrored bool `json:"mirrored,omitempty"`
}

// Values of Policy.Consistency, Policy.Align and Policy.Mode other than
// the defaults.
const (
	Leased        = "leased"
	AlignEpoch    = "epoch"
	AlignCalendar = "calendar"
	Shadow        = "shadow"
)

// Concurrency is the algorithm of a permit policy: at most limits[0].limit
// permits live at once per key (POST /v1/permits), no window.
const Concurrency = "concurrency"

// IsConcurrency reports whether the policy counts permits, not hits.
func (p Policy) IsConcurrency() bool { return p.Algorithm == Concurrency }

// IsLeased reports whether the policy's budget may be spent from leases.
func (p Policy) IsLeased() bool { return p.Consistency == Leased }

// EpochAligned reports whether the policy's windows are aligned to the epoch.
func (p Policy) EpochAligned() bool { return p.Align == AlignEpoch }

// CalendarAligned reports whether the policy's fixed windows are calendar
// periods (days, ISO weeks, months, years in Timezone).
func (p Policy) CalendarAligned() bool { return p.Align == AlignCalendar }

// IsShadow reports whether the policy counts without ever refusing.
func (p Policy) IsShadow() bool { return p.Mode == Shadow }

// Canonical returns the policy with its options in their stored form:
// the defaults' names ("strict", "anchored", "enforce", the zone "UTC")
// become empty.
func (p Policy) Canonical() Policy {
	if p.Consistency == "strict" {
		p.Consistency = ""
	}
	if p.Align == "anchored" {
		p.Align = ""
	}
	if p.Mode == "enforce" {
		p.Mode = ""
	}
	if p.Timezone == "UTC" {
		p.Timezone = ""
	}
	return p
}

// Limit is one limit of a policy: Limit hits of cost 1 per Window. Burst is
// a token bucket's capacity (0 means Limit); only token_bucket has one.
type Limit struct {
	Limit  int64    `json:"limit"`
	Window Duration `json:"window"`
	Burst  int64    `json:"burst,omitempty"`
}

// Alg is the policy's algorithm; call it only on a valid policy.
func (p Policy) Alg() window.Algorithm {
	a, _ := window.ParseAlgorithm(p.Algorithm)
	return a
}

// Decider is the algorithm the state machine decides the policy's hits
// with: Alg, except that an epoch-aligned fixed window is
// window.FixedWindowEpoch and a calendar one window.FixedWindowCalendar.
// Call it only on a valid policy.
func (p Policy) Decider() window.Algorithm {
	a := p.Alg()
	switch {
	case a != window.FixedWindow:
		return a
	case p.EpochAligned():
		return window.FixedWindowEpoch
	case p.CalendarAligned():
		return window.FixedWindowCalendar
	}
	return a
}

// WindowLimits converts the limits for the window package (a calendar
// policy's zone loaded, which validation checked).
func (p Policy) WindowLimits() []window.Limit {
	var loc *time.Location
	if p.CalendarAligned() {
		loc, _ = LoadZone(p.Timezone)
	}
	out := make([]window.Limit, len(p.Limits))
	for i, l := range p.Limits {
		out[i] = window.Limit{Limit: l.Limit, WindowMs: l.Window.Milliseconds(), Burst: l.Burst, Loc: loc}
	}
	return out
}

// Equal reports whether two policies are the same.
func (p Policy) Equal(q Policy) bool {
	if p.Name != q.Name || p.Algorithm != q.Algorithm || len(p.Limits) != len(q.Limits) ||
		p.Consistency != q.Consistency || p.Align != q.Align || p.Timezone != q.Timezone || p.Mode != q.Mode ||
		p.Scope != q.Scope || p.Mirrored != q.Mirrored {
		return false
	}
	for i := range p.Limits {
		if p.Limits[i] != q.Limits[i] {
			return false
		}
	}
	return p.Envoy.Equal(q.Envoy)
}

// String is a one-line summary, e.g. `api token_bucket 10/1s burst 20, 1000/24h`.
func (p Policy) String() string {
	var b strings.Builder
	b.WriteString(p.Name + " " + p.Algorithm + " ")
	for i, l := range p.Limits {
		if i > 0 {
			b.WriteString(", ")
		}
		if p.IsConcurrency() {
			fmt.Fprintf(&b, "%d concurrent", l.Limit)
			continue
		}
		fmt.Fprintf(&b, "%d/%s", l.Limit, l.Window)
		if l.Burst != 0 {
			fmt.Fprintf(&b, " burst %d", l.Burst)
		}
	}
	if p.Consistency != "" {
		b.WriteString(" " + p.Consistency)
	}
	if p.Align != "" {
		b.WriteString(" align " + p.Align)
	}
	if p.Timezone != "" {
		b.WriteString(" " + p.Timezone)
	}
	if p.Mode != "" {
		b.WriteString(" " + p.Mode)
	}
	if p.Scope != "" {
		b.WriteString(" scope " + p.Scope)
	}
	if p.Mirrored {
		b.WriteString(" (mirrored from the parent)")
	}
	return b.String()
}

// ValidateName checks a policy name: 1-64 characters of [A-Za-z0-9_.:-].
func ValidateName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("name %q must be 1 to %d characters", name, MaxNameLen)
	}
	for _, c := range []byte(name) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("_.:-", c) >= 0
		if !ok {
			return fmt.Errorf("name %q may only contain letters, digits and _ . : -", name)
		}
	}
	return nil
}

// Validate reports every problem, each naming its field
// (e.g. "limits[1].window: ...").
func (p Policy) Validate() error {
	var errs []error
	if err := ValidateName(p.Name); err != nil {
		errs = append(errs, err)
	}
	alg, err := window.ParseAlgorithm(p.Algorithm)
	if err != nil {
		errs = append(errs, fmt.Errorf("algorithm %q is unknown: want fixed_window, sliding_window, token_bucket or concurrency", p.Algorithm))
	}
	if p.IsConcurrency() {
		errs = append(errs, p.concurrencyErrs()...)
	} else {
		errs = append(errs, p.limitErrs(alg, err)...)
	}
	switch p.Consistency {
	case "", Leased:
		if p.Consistency == Leased && p.IsConcurrency() {
			errs = append(errs, fmt.Errorf("consistency %q: a concurrency policy's permits always go through the log", p.Consistency))
		}
	default:
		errs = append(errs, fmt.Errorf("consistency %q is unknown: want strict or leased", p.Consistency))
	}
	errs = append(errs, p.optionErrs(alg, err)...)
	errs = append(errs, p.scopeErrs()...)
	if p.Envoy != nil {
		if err := p.Envoy.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("envoy: %w", err))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return &Error{Policy: p.Name, Errs: errs}
}

// optionErrs checks align, timezone and mode.
func (p Policy) optionErrs(alg window.Algorithm, algErr error) []error {
	var errs []error
	switch p.Align {
	case "":
	case AlignEpoch, AlignCalendar:
		if algErr == nil && alg != window.FixedWindow {
			errs = append(errs, fmt.Errorf("align %q: only fixed_window windows can be aligned", p.Align))
		}
		if p.Align == AlignCalendar && p.IsLeased() {
			errs = append(errs, errors.New("align calendar: a leased policy cannot be calendar-aligned yet (use strict)"))
		}
	default:
		errs = append(errs, fmt.Errorf("align %q is unknown: want anchored, epoch or calendar", p.Align))
	}
	if p.Timezone != "" {
		if !p.CalendarAligned() {
			errs = append(errs, fmt.Errorf("timezone %q: only align calendar has a time zone", p.Timezone))
		} else if _, err := LoadZone(p.Timezone); err != nil {
			errs = append(errs, err)
		}
	}
	switch p.Mode {
	case "":
	case Shadow:
		if p.IsLeased() {
			errs = append(errs, errors.New("mode shadow: a leased policy cannot be in shadow mode yet (use strict)"))
		}
		if p.IsConcurrency() {
			errs = append(errs, errors.New("mode shadow: a concurrency policy cannot be in shadow mode yet"))
		}
	default:
		errs = append(errs, fmt.Errorf("mode %q is unknown: want enforce or shadow", p.Mode))
	}
	return errs
}

// concurrencyErrs checks a concurrency policy's one limit: a count, no
// window, no burst.
func (p Policy) concurrencyErrs() []error {
	if len(p.Limits) != 1 {
		return []error{fmt.Errorf("limits: a concurrency policy has exactly one limit, got %d", len(p.Limits))}
	}
	var errs []error
	l := p.Limits[0]
	if l.Limit < 1 || l.Limit > MaxConcurrency {
		errs = append(errs, fmt.Errorf("limits[0].limit %d must be between 1 and %d", l.Limit, MaxConcurrency))
	}
	if l.Window != 0 {
		errs = append(errs, fmt.Errorf("limits[0].window %s: a concurrency limit has no window (permits end at their TTL)", l.Window))
	}
	if l.Burst != 0 {
		errs = append(errs, errors.New("limits[0].burst: only token_bucket has a burst"))
	}
	return errs
}

// limitErrs checks the limits of a windowed policy.
func (p Policy) limitErrs(alg window.Algorithm, algErr error) []error {
	var errs []error
	err := algErr
	switch {
	case len(p.Limits) == 0:
		errs = append(errs, errors.New("limits: at least one limit is required"))
	case len(p.Limits) > MaxLimits:
		errs = append(errs, fmt.Errorf("limits: %d limits, at most %d", len(p.Limits), MaxLimits))
	}
	for i, l := range p.Limits {
		field := fmt.Sprintf("limits[%d]", i)
		if l.Limit < 1 || l.Limit > MaxLimit {
			errs = append(errs, fmt.Errorf("%s.limit %d must be between 1 and %d", field, l.Limit, int64(MaxLimit)))
		}
		w := time.Duration(l.Window)
		switch {
		case p.CalendarAligned():
			if !window.IsCalendarPeriod(w.Milliseconds()) || w%time.Millisecond != 0 {
				errs = append(errs, fmt.Errorf("%s.window %s: a calendar window is 1d, 1w, 1mo or 1y", field, l.Window))
			}
		case w.Milliseconds() == window.MonthMs || w.Milliseconds() == window.YearMs:
			errs = append(errs, fmt.Errorf("%s.window %s is a calendar period: set align: calendar (a rolling month or year is not defined)", field, l.Window))
		case w <= 0:
			errs = append(errs, fmt.Errorf("%s.window %s must be positive", field, w))
		case w > MaxWindow:
			errs = append(errs, fmt.Errorf("%s.window %s is over 366 days", field, w))
		case w%time.Millisecond != 0:
			errs = append(errs, fmt.Errorf("%s.window %s must be a whole number of milliseconds", field, w))
		}
		if l.Burst != 0 && err == nil && alg != window.TokenBucket {
			errs = append(errs, fmt.Errorf("%s.burst: only token_bucket has a burst", field))
		} else if l.Burst < 0 || l.Burst > MaxLimit {
			errs = append(errs, fmt.Errorf("%s.burst %d must be between 1 and %d", field, l.Burst, int64(MaxLimit)))
		}
		for j := range i {
			if p.Limits[j].Window == l.Window && w > 0 {
				errs = append(errs, fmt.Errorf("%s.window %s repeats limits[%d].window: each limit needs its own window", field, w, j))
			}
		}
	}
	return errs
}

// Error is a failed validation: one error per field at fault.
type Error struct {
	Policy string
	Errs   []error
}

func (e *Error) Error() string {
	msgs := make([]string, len(e.Errs))
	for i, err := range e.Errs {
		msgs[i] = err.Error()
	}
	return fmt.Sprintf("policy %q: %s", e.Policy, strings.Join(msgs, "; "))
}

// Duration is a time.Duration written as a Go duration string ("1s", "24h").
type Duration time.Duration

// Milliseconds returns the duration in whole milliseconds.
func (d Duration) Milliseconds() int64 { return time.Duration(d).Milliseconds() }

// String formats like time.Duration without zero trailing units, the way
// people write windows: "1m", "24h", "1h30m", "1.5s"; the calendar periods
// a month and a year are "1mo" and "1y".
func (d Duration) String() string {
	switch d.Milliseconds() {
	case window.MonthMs:
		return "1mo"
	case window.YearMs:
		return "1y"
	}
	s := time.Duration(d).String()
	if t, ok := strings.CutSuffix(s, "m0s"); ok {
		s = t + "m"
		if t, ok := strings.CutSuffix(s, "h0m"); ok {
			s = t + "h"
		}
	}
	return s
}

// MarshalText writes the Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads a window as ParseWindow does.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := ParseWindow(string(b))
	if err != nil {
		return fmt.Errorf("window %q is not a Go duration such as 1s, 1m30s or 24h, nor 1d, 1w, 1mo or 1y", b)
	}
	*d = v
	return nil
}

// ParseWindow reads a window: a Go duration ("1s", "1m30s", "24h"), a
// whole number of days or weeks ("1d", "7d", "1w"), or the calendar
// periods "1mo" and "1y" (only align calendar accepts those).
func ParseWindow(s string) (Duration, error) {
	switch s {
	case "1mo":
		return Duration(window.MonthMs * int64(time.Millisecond)), nil
	case "1y":
		return Duration(window.YearMs * int64(time.Millisecond)), nil
	}
	units := []struct {
		suffix, name string
		unit         time.Duration
	}{{"d", "days", 24 * time.Hour}, {"w", "weeks", 7 * 24 * time.Hour}}
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil || v < 1 || v > int64(MaxWindow/u.unit)+1 {
				return 0, fmt.Errorf("window %q: want a whole number of %s", s, u.name)
			}
			return Duration(time.Duration(v) * u.unit), nil
		}
	}
	v, err := time.ParseDuration(s)
	return Duration(v), err
}

// Fixed returns a fixed-window policy with one limit, as --limit and
// --window describe the default one.
func Fixed(name string, limit int64, w time.Duration) Policy {
	return Policy{Name: name, Algorithm: window.FixedWindow.String(), Limits: []Limit{{Limit: limit, Window: Duration(w)}}}
}
