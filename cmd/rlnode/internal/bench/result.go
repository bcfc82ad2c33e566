package bench

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is the outcome of one Run. Every request sent after the warmup
// and not aborted by cancellation is counted exactly once, so
// Requests == OK + Refused + Errors.
type Result struct {
	Mode        string  // "closed" or "open"
	Concurrency int     // closed: workers; open: cap on requests in flight
	Rate        float64 // open: target requests/s; closed: 0
	Keys        int
	Dist        string
	Path        string

	Duration time.Duration // measured window, warmup excluded

	Requests int64 // OK + Refused + Errors
	OK       int64 // 2xx responses
	Allowed  int64 // requests the service allowed: any 2xx (the status decides, the body is not parsed), so equal to OK
	Refused  int64 // 429 responses
	Errors   int64 // transport errors, 5xx and any other status
	Dropped  int64 // open loop only: scheduled requests never sent because Concurrency were already in flight

	// ErrorKinds breaks Errors down: an HTTP status ("503"), with the
	// problem+json code when the body has one ("503:no_leader"), or a
	// transport failure ("timeout", "conn_refused", "conn_reset",
	// "conn_closed", "conn", "other").
	ErrorKinds map[string]int64

	Throughput float64 // all counted requests (errors included) per second
	Goodput    float64 // requests the service decided (OK + Refused) per second

	// Latency of decided requests (2xx and 429); errors are excluded so that
	// fast failures (e.g. connection refused) do not flatter it. In open
	// mode it is measured from the intended send time.
	Latency Latency

	Interrupted bool // the context was cancelled before the run completed

	// Trace is each measured second (Config.Trace); the last one may be
	// partial.
	Trace []TraceSecond
}

// Latency summarises a latency distribution (percentiles to within ~1%).
type Latency struct {
	P50, P90, P99, P999, Max, Mean time.Duration
}

func (r *runner) result(measured time.Duration, dropped int64) Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := &r.total
	res := Result{
		Mode:        "closed",
		Concurrency: r.cfg.Concurrency,
		Rate:        r.cfg.Rate,
		Keys:        r.cfg.Keys,
		Dist:        r.cfg.Dist,
		Path:        r.cfg.Path,
		Duration:    measured,
		Requests:    t.ok + t.refused + t.errors,
		OK:          t.ok,
		Allowed:     t.ok,
		Refused:     t.refused,
		Errors:      t.errors,
		Dropped:     dropped,
		ErrorKinds:  maps.Clone(t.kinds),
		Latency: Latency{
			P50:  t.hist.quantile(0.50),
			P90:  t.hist.quantile(0.90),
			P99:  t.hist.quantile(0.99),
			P999: t.hist.quantile(0.999),
			Max:  t.hist.max,
			Mean: t.hist.mean(),
		},
		Interrupted: r.ctx.Err() != nil,
	}
	if r.cfg.Trace {
		res.Trace = t.trace.seconds()
	}
	if r.cfg.Rate > 0 {
		res.Mode = "open"
	}
	if res.ErrorKinds == nil {
		res.ErrorKinds = map[string]int64{} // JSON consumers get {} rather than null
	}
	if s := measured.Seconds(); s > 0 {
		res.Throughput = float64(res.Requests) / s
		res.Goodput = float64(res.OK+res.Refused) / s
	}
	return res
}

// WriteTable writes a human-readable report.
func (r Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(name, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t%s\n", name, fmt.Sprintf(format, args...))
	}
	if r.Mode == "open" {
		row("mode", "open loop, %g req/s target, max %d in flight", r.Rate, r.Concurrency)
	} else {
		row("mode", "closed loop, %d workers", r.Concurrency)
	}
	row("workload", "GET %s, %d keys, %s", r.Path, r.Keys, r.Dist)
	row("duration", "%.3fs", r.Duration.Seconds())
	if r.Interrupted {
		row("note", "interrupted: partial results")
	}
	row("requests", "%d", r.Requests)
	row("  ok", "%-10d %7s", r.OK, percent(r.OK, r.Requests))
	row("  refused (429)", "%-10d %7s", r.Refused, percent(r.Refused, r.Requests))
	row("  errors", "%-10d %7s  %s", r.Errors, percent(r.Errors, r.Requests), kindsSummary(r.ErrorKinds))
	if r.Mode == "open" {
		row("dropped", "%-10d (scheduled but not sent: all %d in flight)", r.Dropped, r.Concurrency)
	}
	row("throughput", "%.1f req/s (ok+refused %.1f req/s)", r.Throughput, r.Goodput)
	for _, l := range []struct {
		name string
		d    time.Duration
	}{
		{"latency p50", r.Latency.P50},
		{"latency p90", r.Latency.P90},
		{"latency p99", r.Latency.P99},
		{"latency p99.9", r.Latency.P999},
		{"latency max", r.Latency.Max},
		{"latency mean", r.Latency.Mean},
	} {
		row(l.name, "%.3f ms", ms(l.d))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("bench: write table: %w", err)
	}
	if len(r.Trace) > 0 {
		fmt.Fprintln(w)
		if err := writeTrace(w, r.Trace); err != nil {
			return fmt.Errorf("bench: write table: %w", err)
		}
	}
	return nil
}

func percent(n, total int64) string {
	if total == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f%%", 100*float64(n)/float64(total))
}

// kindsSummary lists error kinds, most frequent first.
func kindsSummary(kinds map[string]int64) string {
	names := slices.Collect(maps.Keys(kinds))
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(kinds[b], kinds[a]), strings.Compare(a, b))
	})
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s=%d", n, kinds[n])
	}
	return strings.Join(parts, " ")
}

// jsonResult fixes the machine-readable field names; durations are
// milliseconds as floats (µs precision), rates are per second.
type jsonResult struct {
	Mode          string           `json:"mode"`
	Concurrency   int              `json:"concurrency"`
	Rate          float64          `json:"rate"`
	Keys          int              `json:"keys"`
	Dist          string           `json:"dist"`
	Path          string           `json:"path"`
	DurationMs    float64          `json:"durationMs"`
	Requests      int64            `json:"requests"`
	OK            int64            `json:"ok"`
	Allowed       int64            `json:"allowed"`
	Refused       int64            `json:"refused"`
	Errors        int64            `json:"errors"`
	Dropped       int64            `json:"dropped"`
	ErrorKinds    map[string]int64 `json:"errorKinds"`
	ThroughputRps float64          `json:"throughputRps"`
	GoodputRps    float64          `json:"goodputRps"`
	LatencyMs     jsonLatency      `json:"latencyMs"`
	Interrupted   bool             `json:"interrupted"`
	Trace         []jsonSecond     `json:"trace,omitempty"`
}

type jsonSecond struct {
	Second   int     `json:"second"`
	Requests int64   `json:"requests"`
	Errors   int64   `json:"errors"`
	P99      float64 `json:"p99Ms"`
	Max      float64 `json:"maxMs"`
}

type jsonLatency struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// MarshalJSON gives Result the same stable encoding WriteJSON uses.
func (r Result) MarshalJSON() ([]byte, error) {
	kinds := r.ErrorKinds
	if kinds == nil {
		kinds = map[string]int64{}
	}
	var trace []jsonSecond
	for _, s := range r.Trace {
		trace = append(trace, jsonSecond{Second: s.Second, Requests: s.Requests, Errors: s.Errors, P99: ms(s.P99), Max: ms(s.Max)})
	}
	return json.Marshal(jsonResult{
		Mode:          r.Mode,
		Concurrency:   r.Concurrency,
		Rate:          r.Rate,
		Keys:          r.Keys,
		Dist:          r.Dist,
		Path:          r.Path,
		DurationMs:    ms(r.Duration),
		Requests:      r.Requests,
		OK:            r.OK,
		Allowed:       r.Allowed,
		Refused:       r.Refused,
		Errors:        r.Errors,
		Dropped:       r.Dropped,
		ErrorKinds:    kinds,
		ThroughputRps: round(r.Throughput, 1),
		GoodputRps:    round(r.Goodput, 1),
		LatencyMs: jsonLatency{
			P50:  ms(r.Latency.P50),
			P90:  ms(r.Latency.P90),
			P99:  ms(r.Latency.P99),
			P999: ms(r.Latency.P999),
			Max:  ms(r.Latency.Max),
			Mean: ms(r.Latency.Mean),
		},
		Interrupted: r.Interrupted,
		Trace:       trace,
	})
}

// WriteJSON writes the result as one indented JSON object.
func (r Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("bench: write json: %w", err)
	}
	return nil
}

func ms(d time.Duration) float64 { return round(float64(d)/float64(time.Millisecond), 3) }

func round(x float64, decimals int) float64 {
	p := math.Pow10(decimals)
	return math.Round(x*p) / p
}
