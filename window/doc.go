// Package window holds the decisions rlnode applies to every hit: pure
// functions of their inputs that read no clock, do no I/O and use integer
// arithmetic only, so every replica that applies the same log entry reaches
// the same decision bit for bit.
//
// Decide is the original fixed-window decision (kept for its callers).
// Apply dispatches on an Algorithm and decides one hit against one Limit of
// a policy; the caller keeps one State per (policy, client, limit) and
// stores the returned State only when every part of an all-or-nothing group
// was allowed. ExpiresAt says when a State may be dropped, MostConstraining
// which part a response describes, Peek what a status read shows.
//
// # Common rules
//
// Times are Unix milliseconds. now and stored instants are clamped into
// [0, MaxTime] (MaxTime = 2^61) and WindowMs to at most MaxTime. A cost
// below 1 counts as 1. A refused hit returns the State it was given,
// unchanged. A hit whose cost is above what the limit could ever allow is
// CostExceedsLimit with RetryAfterMs = -1; so is every hit on a Limit with
// Limit < 1 or WindowMs < 1 or of an unknown Algorithm. Products that can
// exceed 64 bits are formed in 128 bits (math/bits); nothing panics or
// wraps for any int64 input. ExpiresAt returns MaxInt64 (never) for a state
// that still matters at MaxTime, and MinInt64 when no state can matter
// (invalid limit, unknown algorithm). RetryAfterMs is exact for every state
// Apply stores on a clock that never runs backwards (the FSM's).
//
// # fixed_window
//
// State{A: window start, B: count, C: 0}. Windows are anchored at the key's
// first hit, not aligned to the epoch (seed 000/003), exactly as Decide:
//
//	fresh   = now - A >= W            (then start = now, used = 0; else start = A, used = B)
//	allowed = used + cost <= L; cost > L is CostExceedsLimit
//	count   = used + cost (allowed), used (refused)
//	Remaining = max(0, L - count); ResetAt = start + W; WindowStart = start
//	RetryAfterMs = start + W - now (refused; >= 1)
//	ExpiresAt = A + W
//
// # fixed_window aligned to the epoch (FixedWindowEpoch)
//
// A policy's fixed_window with align: epoch. State{A: the aligned start of
// the window B counts, B: count, C: 0}; windows are [k*W, (k+1)*W) in Unix
// ms, the same for every key, as envoyproxy/ratelimit and most Redis
// limiters cut them:
//
//	cur     = now - now mod W;  a = A - A mod W
//	start, used = (a, B) if a >= cur, else (cur, 0)
//	allowed = used + cost <= L; cost > L is CostExceedsLimit
//	Remaining = max(0, L - count); ResetAt = start + W; WindowStart = start
//	RetryAfterMs = start + W - now (refused; >= 1)
//	ExpiresAt = a + W
//
// a > cur only for a state written on a clock ahead of now; its window is
// kept until it ends, as an anchored start after now is.
//
// # fixed_window aligned to the calendar (FixedWindowCalendar)
//
// A policy's fixed_window with align: calendar. WindowMs names the period
// (DayMs, WeekMs, MonthMs, YearMs: a month and a year as their Gregorian
// averages, lengths only calendar limits may have), Limit.Loc the zone.
// State{A: the start of the period B counts, B: count, C: its end}. A period
// begins at the first instant whose local date is its first day (local
// midnight; where DST skips midnight, the jump past it; where it repeats
// midnight, the first one); weeks begin on Monday (ISO):
//
//	[cur, curEnd) = the period holding now
//	[a, aEnd) = [A, C) as stored (C <= A: the period holding A)
//	start, end, used = (a, aEnd, B) if now < aEnd, else (cur, curEnd, 0)
//	allowed = used + cost <= L; cost > L is CostExceedsLimit
//	Remaining = max(0, L - count); ResetAt = end; WindowStart = start
//	RetryAfterMs = end - now (refused; >= 1)
//	ExpiresAt = aEnd
//
// Boundaries come from Go's time package (integer arithmetic on the zone's
// rules), so replicas with the same zone data agree to the ms. The stored
// end lets a period under way end where it was cut after a zone change.
//
// # sliding_window
//
// State{A: current aligned window start, B: its count, C: the previous
// window's count}. The estimate Cloudflare uses (seed 004), compared exactly.
// With W the window and L the limit:
//
//	curStart = now - now mod W      (windows aligned to multiples of W since the epoch)
//	e        = now - curStart       (0 <= e < W)
//	normalise: A == curStart -> (cur, prev) = (B, C); A == curStart - W -> (0, B); older -> (0, 0)
//	           (A is first aligned down to W; an A after curStart reads as (B, C))
//	carried  = ceil(prev * (W - e) / W)
//	allowed  iff prev*(W-e) + (cur+cost)*W <= L*W  <=>  carried + cur + cost <= L
//	cost > L is CostExceedsLimit
//
// The equivalence is exact because L - cur - cost is an integer, so no
// boundary can let one extra hit through. After an allowed hit the State is
// {curStart, cur + cost, prev}.
//
//	Remaining    = max(0, L - carried - cur')       (cur' = cur + cost if allowed, else cur)
//	ResetAt      = curStart + 2W if cur' > 0; else curStart + W if prev > 0; else now
//	WindowStart  = curStart
//	RetryAfterMs = the smallest d >= 1 with the hit allowed at now + d if nothing else arrives:
//	    in this window, if k = L - cost - cur >= 0: e' = W - floor(k*W / prev), d = e' - e if e' < W;
//	    else in the next window (prev becomes cur): e2 = 0 if cur <= L - cost,
//	    otherwise e2 = W - floor((L-cost)*W / cur); d = W - e + e2 (<= 2W - e).
//	ExpiresAt    = A + 2W
//
// # token_bucket
//
// State{A: theoretical arrival time (TAT) in whole ms, B: its fraction in
// units of 1/C ms, 0 <= B < C, C: the Limit the fraction was written with}.
// The zero State is a full bucket. GCRA with exact rational time: the
// bucket holds Bc = Burst (or L when Burst <= 0) tokens and refills L tokens
// per W ms, so one token is W/L ms. Time is counted in units of 1/L ms, in
// which one token is exactly W units and every TAT is a whole number of
// units: no rounding and no drift over any number of hits (1 per 24 h and
// 10,000 per second are both exact to the ms).
//
//	TAT   = A + B/L ms (a fraction written under another limit C is rounded up to 1/L ms)
//	debt  = max(0, TAT - now) * L         (units; 0 means the bucket is full: a new key starts full)
//	allowed iff debt + cost*W <= Bc*W     (cost tokens are there); cost > Bc is CostExceedsLimit
//	new TAT = now + (debt + cost*W) / L   (stored as A = whole ms, B = remainder, C = L)
//	Remaining    = floor((Bc*W - debt') / W)         whole tokens left (debt' after the hit if allowed)
//	RetryAfterMs = ceil((debt + cost*W - Bc*W) / L)  exact ms until cost tokens are there
//	ResetAt      = max(now, ceil(TAT'))              when the bucket is full again
//	Result.Limit = Bc; WindowStart = 0
//	ExpiresAt    = ceil(TAT)
//
// Bc is bounded so that an empty bucket refills within MaxRefillMs = 2^60 ms
// (36 million years): Bc = min(Bc, ceil(2^60 * L / W)). Only absurd policies
// reach the bound (a burst of 2^40 on 1 per year); it keeps every TAT below
// 2^63 so nothing ever saturates. A changed policy keeps the time debt: the
// stored TAT stays, so the tokens it stands for follow the new rate and
// capacity.
//
// # Peek
//
// Peek(alg, l, s, now) describes a key without a hit (status reads):
// Remaining, ResetAt and WindowStart as they stand, Outcome and RetryAfterMs
// as a hit of cost 1 would get them. A CostExceedsLimit Result likewise
// describes the state as it stands.
//
// # MostConstraining
//
// The least Remaining, ties to the latest ResetAt, then to the first part.
package window
