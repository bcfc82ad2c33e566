package window

import "math/bits"

// u128 is an unsigned 128-bit integer. Every product the algorithms form is
// of two values below 2^63, so it stays below 2^126 and sums of a few of
// them never wrap.
type u128 struct{ hi, lo uint64 }

// mul returns a*b for a, b >= 0.
func mul(a, b int64) u128 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	return u128{hi, lo}
}

func (x u128) add(y u128) u128 {
	lo, c := bits.Add64(x.lo, y.lo, 0)
	hi, _ := bits.Add64(x.hi, y.hi, c)
	return u128{hi, lo}
}

func (x u128) addSmall(y int64) u128 { return x.add(u128{0, uint64(y)}) }

// sub returns x-y; callers ensure x >= y.
func (x u128) sub(y u128) u128 {
	lo, b := bits.Sub64(x.lo, y.lo, 0)
	hi, _ := bits.Sub64(x.hi, y.hi, b)
	return u128{hi, lo}
}

func (x u128) less(y u128) bool { return x.hi < y.hi || (x.hi == y.hi && x.lo < y.lo) }

func (x u128) isZero() bool { return x.hi == 0 && x.lo == 0 }

// divmod returns x/d and x%d for d >= 1 and ok = false (quotient and
// remainder unset) when the quotient does not fit in an int64.
func (x u128) divmod(d int64) (q, r int64, ok bool) {
	if x.hi >= uint64(d) {
		return 0, 0, false
	}
	uq, ur := bits.Div64(x.hi, x.lo, uint64(d))
	if uq > maxInt64 {
		return 0, 0, false
	}
	return int64(uq), int64(ur), true
}

// ceilDiv returns ceil(x/d), saturated at limit (x/d >= 0, limit >= 0).
func (x u128) ceilDiv(d, limit int64) int64 {
	q, r, ok := x.divmod(d)
	if !ok {
		return limit
	}
	if r > 0 {
		if q == maxInt64 {
			return limit
		}
		q++
	}
	return min(q, limit)
}

// floorDiv returns floor(x/d), saturated at limit.
func (x u128) floorDiv(d, limit int64) int64 {
	q, _, ok := x.divmod(d)
	if !ok {
		return limit
	}
	return min(q, limit)
}

const maxInt64 = 1<<63 - 1
