package window

import "math/big"

// The oracles below decide the same hits straight from the definitions in
// the issue (the sliding estimate scaled by the window, exact token counts
// as math/big rationals) and find waits by searching, with none of the
// implementation's reformulations (ceil weights, GCRA, closed-form waits). They assume time never runs
// backwards, as the FSM's clock guarantees.

// slidingOracle keeps the allowed hits per aligned window.
type slidingOracle struct {
	l, w   int64
	counts map[int64]int64 // aligned window index -> allowed cost
}

func newSlidingOracle(l, w int64) *slidingOracle {
	return &slidingOracle{l: l, w: w, counts: map[int64]int64{}}
}

// scaled is the estimate cur + prev*(w-e)/w at t, times w: the issue's
// literal formula, in int64 (test limits and windows are small).
func (o *slidingOracle) scaled(t int64) int64 {
	k, e := t/o.w, t%o.w
	return o.counts[k-1]*(o.w-e) + o.counts[k]*o.w
}

func (o *slidingOracle) fits(t, cost int64) bool {
	return o.scaled(t)+cost*o.w <= o.l*o.w
}

// hit decides one hit and returns the outcome, remaining, resetAt and
// retryAfter the definitions give.
func (o *slidingOracle) hit(t, cost int64) (Outcome, int64, int64, int64) {
	var out Outcome
	retry := int64(0)
	switch {
	case cost > o.l:
		out, retry = CostExceedsLimit, -1
	case o.fits(t, cost):
		out = Allowed
		o.counts[t/o.w] += cost
	default:
		out = Refused
		for retry = 1; !o.fits(t+retry, cost); retry++ {
		}
	}
	// remaining: the largest n >= 0 with estimate + n <= l.
	rem := int64(0)
	for o.scaled(t)+(rem+1)*o.w <= o.l*o.w {
		rem++
	}
	k := t / o.w
	reset := t
	switch {
	case o.counts[k] > 0:
		reset = (k + 2) * o.w
	case o.counts[k-1] > 0:
		reset = (k + 1) * o.w
	}
	return out, rem, reset, retry
}

// bucketOracle keeps the tokens as an exact rational.
type bucketOracle struct {
	l, w, capacity int64
	tokens         *big.Rat
	last           int64
}

func newBucketOracle(l, w, capacity, start int64) *bucketOracle {
	return &bucketOracle{l: l, w: w, capacity: capacity, tokens: big.NewRat(capacity, 1), last: start}
}

// at is the token count at t: refilled at l/w per ms, capped at capacity.
func (o *bucketOracle) at(t int64) *big.Rat {
	tok := new(big.Rat).SetFrac64((t-o.last)*o.l, o.w)
	tok.Add(tok, o.tokens)
	if c := big.NewRat(o.capacity, 1); tok.Cmp(c) > 0 {
		tok = c
	}
	return tok
}

// ceilMs is the smallest whole d >= 0 with d*l/w >= missing.
func (o *bucketOracle) ceilMs(missing *big.Rat) int64 {
	if missing.Sign() <= 0 {
		return 0
	}
	x := new(big.Rat).Mul(missing, big.NewRat(o.w, o.l))
	q, r := new(big.Int).QuoRem(x.Num(), x.Denom(), new(big.Int))
	if r.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

func (o *bucketOracle) hit(t, cost int64) (Outcome, int64, int64, int64) {
	tok := o.at(t)
	var out Outcome
	retry := int64(0)
	switch {
	case cost > o.capacity:
		out, retry = CostExceedsLimit, -1
	case tok.Cmp(big.NewRat(cost, 1)) >= 0:
		out = Allowed
		tok.Sub(tok, big.NewRat(cost, 1))
		o.tokens, o.last = tok, t
	default:
		out = Refused
		retry = o.ceilMs(new(big.Rat).Sub(big.NewRat(cost, 1), tok))
	}
	rem := new(big.Int).Quo(tok.Num(), tok.Denom()).Int64()
	reset := t + o.ceilMs(new(big.Rat).Sub(big.NewRat(o.capacity, 1), tok))
	return out, rem, reset, retry
}
