package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBucketBoundsInvertBucketOf(t *testing.T) {
	prev := -1
	for us := uint64(0); us <= histMaxUS; us = us*1001/1000 + 1 {
		i := bucketOf(us)
		if i < prev || i >= histBuckets {
			t.Fatalf("bucketOf(%d) = %d: not monotonic or out of range (prev %d, buckets %d)", us, i, prev, histBuckets)
		}
		prev = i
		lo, hi := bucketBounds(i)
		if us < lo || us >= hi {
			t.Fatalf("value %d µs in bucket %d = [%d, %d)", us, i, lo, hi)
		}
		if hi-lo > 1 && float64(hi-lo)/float64(lo) > 1.0/histSub {
			t.Fatalf("bucket %d = [%d, %d) is wider than 1/%d of its bound", i, lo, hi, histSub)
		}
	}
	if got := bucketOf(math.MaxUint64); got != histBuckets-1 {
		t.Fatalf("huge values must clamp into the last bucket, got %d", got)
	}
}

// TestHistogramQuantiles compares the histogram with exact nearest-rank
// percentiles of the same (log-uniformly spread) values.
func TestHistogramQuantiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h histogram
	vals := make([]time.Duration, 20000)
	for i := range vals {
		// 1µs .. 20s, log-uniform, so every bucket region is exercised.
		d := time.Duration(math.Exp(rng.Float64()*math.Log(2e10-1e3)) + 1e3)
		vals[i] = d
		h.record(d)
	}
	slices.Sort(vals)
	for _, q := range []float64{0, 0.01, 0.25, 0.5, 0.9, 0.99, 0.999, 1} {
		want := vals[rank(q, uint64(len(vals)))-1]
		got := h.quantile(q)
		if diff := math.Abs(float64(got - want)); diff > 0.01*float64(want) && diff > float64(time.Microsecond) {
			t.Errorf("q=%v: got %v, want %v (±1%%)", q, got, want)
		}
	}
	if h.quantile(1) != vals[len(vals)-1] || h.max != vals[len(vals)-1] {
		t.Errorf("max: got %v/%v, want exact %v", h.quantile(1), h.max, vals[len(vals)-1])
	}
	if h.quantile(0) != vals[0] {
		t.Errorf("min: got %v, want exact %v", h.quantile(0), vals[0])
	}
	var sum time.Duration
	for _, v := range vals {
		sum += v
	}
	if want := sum / time.Duration(len(vals)); h.mean() != want {
		t.Errorf("mean: got %v, want %v", h.mean(), want)
	}
}

func TestHistogramMerge(t *testing.T) {
	var a, b, all histogram
	for i := 1; i <= 1000; i++ {
		d := time.Duration(i) * 37 * time.Microsecond
		all.record(d)
		if i%3 == 0 {
			a.record(d)
		} else {
			b.record(d)
		}
	}
	var m histogram
	m.merge(&a)
	m.merge(&b)
	if m != all {
		t.Fatalf("merged histogram differs from recording everything into one")
	}
	var empty histogram
	if empty.quantile(0.5) != 0 || empty.mean() != 0 {
		t.Fatalf("empty histogram must report zeros")
	}
}
