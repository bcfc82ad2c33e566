package window

// token_bucket: State{A: TAT whole ms, B: TAT fraction in 1/C ms, C: the
// Limit that fraction was written with}, GCRA with exact rational time.
// The arithmetic is in doc.go.

// MaxRefillMs bounds how long a bucket may take to refill from empty: a
// capacity that would take longer (over 36 million years, only reachable
// with a huge burst on a tiny rate) holds only the whole tokens, rounded
// up, that refill in MaxRefillMs. It keeps every TAT below 2^63 ms, so the
// arithmetic stays exact with no saturation.
const MaxRefillMs int64 = 1 << 60

// capacity is the bucket's size in tokens: Burst (Limit when Burst <= 0),
// at most ceil(MaxRefillMs*Limit/WindowMs).
func capacity(l Limit) int64 {
	b := l.Limit
	if l.Burst > 0 {
		b = l.Burst
	}
	bound := mul(MaxRefillMs, l.Limit)
	if !bound.less(mul(b, l.WindowMs)) {
		return b
	}
	return bound.ceilDiv(l.WindowMs, maxInt64)
}

// bucketTAT reads the theoretical arrival time of s as ms + frac/l with
// 0 <= frac < l. A fraction written under another Limit is converted,
// rounded up to the next 1/l ms (never more tokens than stored); a fraction
// outside [0, C) reads as the next whole ms. A negative A reads as 0.
func bucketTAT(l int64, s State) (ms, frac int64) {
	ms = max(s.A, 0)
	switch {
	case s.B == 0:
	case s.B < 0 || s.C < 1 || s.B >= s.C:
		ms = bump(ms)
	case s.C == l:
		frac = s.B
	default:
		// s.B < s.C, so s.B*l/s.C < l: the quotient fits.
		if frac = mul(s.B, l).ceilDiv(s.C, l); frac >= l {
			ms, frac = bump(ms), 0
		}
	}
	return ms, frac
}

// ceilTAT is the first whole ms at or after the TAT: when the bucket is
// full again.
func ceilTAT(ms, frac int64) int64 {
	if frac > 0 {
		return bump(ms)
	}
	return ms
}

// bump adds 1 ms unless that would wrap (a garbage state; the clamped
// clock never gets that far either way).
func bump(ms int64) int64 {
	if ms == maxInt64 {
		return ms
	}
	return ms + 1
}

// bucketDebt is how far the TAT is past now, in units of 1/l ms (0 when
// the bucket is full). Below 2^63 * 2^63 = 2^126.
func bucketDebt(l, now, ms, frac int64) u128 {
	if ms < now {
		return u128{}
	}
	return mul(ms-now, l).addSmall(frac)
}

func applyBucket(l Limit, s State, now, cost int64) (Result, State) {
	b := capacity(l)
	ms, frac := bucketTAT(l.Limit, s)
	debt := bucketDebt(l.Limit, now, ms, frac)
	full := mul(b, l.WindowMs)    // the whole bucket, in units of 1/l ms
	need := mul(cost, l.WindowMs) // cost tokens, in the same unit
	after := debt.add(need)
	r := Result{Limit: b, WindowMs: l.WindowMs}
	switch {
	case cost > b:
		r.Outcome, r.RetryAfterMs = CostExceedsLimit, -1
	case !full.less(after):
		// after <= full < (2^60*l + w), so after/l < 2^60 + 2^61 and the
		// new TAT, now + after/l, stays below 2^63.
		q, rem, _ := after.divmod(l.Limit)
		ns := State{A: now + q, B: rem, C: l.Limit}
		r.Outcome = Allowed
		r.Remaining = full.sub(after).floorDiv(l.WindowMs, maxInt64)
		r.ResetAt = ceilTAT(ns.A, ns.B)
		return r, ns
	default:
		// Refill gives l units per ms: the wait is ceil((debt+need-full)/l).
		r.Outcome = Refused
		r.RetryAfterMs = after.sub(full).ceilDiv(l.Limit, maxInt64)
	}
	if debt.less(full) {
		r.Remaining = full.sub(debt).floorDiv(l.WindowMs, maxInt64)
	}
	r.ResetAt = max(now, ceilTAT(ms, frac))
	return r, s
}

func expiresBucket(l Limit, s State) int64 {
	return neverAfter(ceilTAT(bucketTAT(l.Limit, s)))
}
