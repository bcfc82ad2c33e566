package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"
	"time"
)

// trace keeps every decided request's latency by the second it was meant
// to be sent in (4 bytes a request), so each second's p99 and max are exact.
// A worker fills its own; they are merged at exit like the histograms.
type trace struct {
	secs   [][]uint32 // latency in µs, per measured second
	errors []int64    // failed requests, per measured second
}

func (t *trace) grow(sec int) {
	for len(t.secs) <= sec {
		t.secs = append(t.secs, nil)
		t.errors = append(t.errors, 0)
	}
}

func (t *trace) add(at time.Duration, failed bool, latency time.Duration) {
	sec := int(at / time.Second)
	t.grow(sec)
	if failed {
		t.errors[sec]++
		return
	}
	t.secs[sec] = append(t.secs[sec], uint32(min(max(latency, 0)/time.Microsecond, math.MaxUint32)))
}

func (t *trace) merge(o *trace) {
	if len(o.secs) == 0 {
		return
	}
	t.grow(len(o.secs) - 1)
	for i := range o.secs {
		t.secs[i] = append(t.secs[i], o.secs[i]...)
		t.errors[i] += o.errors[i]
	}
}

// TraceSecond is one measured second of a run.
type TraceSecond struct {
	Second   int   // 1 = the first measured second
	Requests int64 // decided (2xx and 429) plus errors
	Errors   int64
	P99, Max time.Duration // of decided requests
}

func (t *trace) seconds() []TraceSecond {
	out := make([]TraceSecond, len(t.secs))
	for i, lat := range t.secs {
		slices.Sort(lat)
		s := TraceSecond{Second: i + 1, Requests: int64(len(lat)) + t.errors[i], Errors: t.errors[i]}
		if n := len(lat); n > 0 {
			s.P99 = time.Duration(lat[min(n-1, int(math.Ceil(0.99*float64(n)))-1)]) * time.Microsecond
			s.Max = time.Duration(lat[n-1]) * time.Microsecond
		}
		out[i] = s
	}
	return out
}

func writeTrace(w io.Writer, secs []TraceSecond) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "second\trequests\terrors\tp99 ms\tmax ms\t")
	for _, s := range secs {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%.3f\t%.3f\t\n", s.Second, s.Requests, s.Errors, ms(s.P99), ms(s.Max))
	}
	return tw.Flush()
}
