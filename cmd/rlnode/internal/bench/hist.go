package bench

import (
	"math"
	"math/bits"
	"time"
)

// histogram is a log-linear latency histogram in the spirit of HDR
// histograms. Values are kept in whole microseconds: below 2*histSub µs
// every microsecond has its own bucket, and above that each power-of-two
// range is split into histSub equal buckets. A bucket is therefore never
// wider than 1/histSub of its lower bound, so reporting its midpoint is
// within ~0.8% of every value that fell into it, while the whole histogram
// is a fixed ~10 KiB no matter how many values it holds. That makes one
// histogram per worker affordable, which keeps the hot path lock-free.
const (
	histSubBits = 6
	histSub     = 1 << histSubBits
	histMaxBits = 26                 // 2^26 µs ≈ 67 s; requests time out long before
	histMaxUS   = 1<<histMaxBits - 1 // larger values are clamped into the last bucket
	histBuckets = (histMaxBits - histSubBits + 1) << histSubBits
)

type histogram struct {
	counts   [histBuckets]uint64
	n        uint64
	sum      time.Duration // for the mean; int64 ns overflows only after ~292 years of latency
	min, max time.Duration // exact, so reported extremes are not bucket-rounded
}

// bucketOf maps a value in µs to its bucket index.
func bucketOf(us uint64) int {
	if us > histMaxUS {
		us = histMaxUS
	}
	n := bits.Len64(us)
	if n <= histSubBits+1 {
		return int(us) // linear region: one bucket per µs
	}
	shift := n - histSubBits - 1 // keeps the top histSubBits+1 bits of us
	return (shift+1)<<histSubBits + int(us>>shift) - histSub
}

// bucketBounds is the inverse of bucketOf: bucket i holds [lo, hi) µs.
func bucketBounds(i int) (lo, hi uint64) {
	if i < 2*histSub {
		return uint64(i), uint64(i) + 1
	}
	shift := i>>histSubBits - 1
	top := uint64(i&(histSub-1) + histSub)
	return top << shift, (top + 1) << shift
}

func (h *histogram) record(d time.Duration) {
	if d < 0 {
		d = 0 // clock oddities must not corrupt the buckets
	}
	h.counts[bucketOf(uint64(d/time.Microsecond))]++
	if h.n == 0 || d < h.min {
		h.min = d
	}
	if d > h.max {
		h.max = d
	}
	h.n++
	h.sum += d
}

func (h *histogram) merge(o *histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}

// rank is the 1-based position of quantile q among n sorted values (the
// nearest-rank definition). The epsilon stops float error in q*n (e.g.
// 0.999*1000) from pushing an exact integer up to the next rank.
func rank(q float64, n uint64) uint64 {
	r := uint64(math.Ceil(q*float64(n) - 1e-9))
	return min(max(r, 1), n)
}

// quantile returns the value at quantile q (0..1) to within one bucket.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	want := rank(q, h.n)
	switch want { // the extremes are known exactly; don't round them to a bucket
	case 1:
		return h.min
	case h.n:
		return h.max
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= want {
			lo, hi := bucketBounds(i)
			mid := time.Duration(lo+hi) * time.Microsecond / 2
			return min(max(mid, h.min), h.max)
		}
	}
	return h.max
}

func (h *histogram) mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return h.sum / time.Duration(h.n)
}
