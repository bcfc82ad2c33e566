package lease

import "time"

// Grant is one grant a holder holds for a key. Info is what the adapter
// needs to answer from it (the cluster's or the client's grant type).
type Grant[G any] struct {
	ID uint64
	// Left is what is not yet spent; Units what was granted.
	Left, Units int64
	// Deadline is the last instant (exclusive) the units may be spent:
	// the send time plus the usable time, on both clocks.
	Deadline Stamp
	Usable   time.Duration
	Info     G
}

func (g *Grant[G]) live(now Stamp) bool { return g.Left > 0 && now.Before(g.Deadline) }

// Key is a holder's state for one key: its grants by deadline, its
// demand, and whether its budget was found spent. A Key is not safe for
// concurrent use: the adapter guards it. Its hot-path methods (Demand,
// Available, Spend, Refusing) neither allocate nor block.
type Key[G any] struct {
	cfg    *Config
	grants []Grant[G] // by Deadline.Mono

	fetching bool
	// Demand: units asked for in the current rate period, and the rate
	// (units per second) over the last full one.
	periodStart, periodUnits int64
	rate                     float64
	lastHit                  int64
	// dry: the last grant lent nothing. The key is refused locally until
	// refuseUntil, and while the next request is in flight.
	dry         bool
	refuseUntil int64
	// quietUntil: no new request before (after a dry grant or a failure).
	quietUntil int64
	// retryAt: when the spent budget has room again, for Retry-After.
	retryAt int64
	last    G
	hasLast bool
}

// NewKey starts a key's state; cfg is shared by every key of a holder
// and must outlive them.
func NewKey[G any](cfg *Config, now Stamp) *Key[G] {
	return &Key[G]{cfg: cfg, periodStart: now.Mono, lastHit: now.Mono}
}

// Demand counts a hit of cost units on the key, decided locally or not.
func (k *Key[G]) Demand(now Stamp, units int64) {
	if d := now.Mono - k.periodStart; d >= int64(ratePeriod) {
		k.rate = float64(k.periodUnits) / time.Duration(d).Seconds()
		k.periodStart, k.periodUnits = now.Mono, 0
	}
	k.periodUnits += units
	k.lastHit = now.Mono
}

// Rate is the key's demand in units per second: the last full period's,
// or the current one's if it is higher already.
func (k *Key[G]) Rate(now Stamp) float64 {
	d := max(time.Duration(now.Mono-k.periodStart), ratePeriod)
	return max(k.rate, float64(k.periodUnits)/d.Seconds())
}

// Available is what live grants hold now: those whose deadline is ahead on
// both clocks.
func (k *Key[G]) Available(now Stamp) int64 {
	var n int64
	for i := range k.grants {
		if k.grants[i].live(now) {
			n += k.grants[i].Left
		}
	}
	return n
}

// Spend takes n units from live grants, earliest deadline first, and
// returns the grant the last unit came from; ok is false (and nothing is
// spent) when live grants hold fewer than n. The deadline is checked here,
// on every decision, against the reading the caller just took.
func (k *Key[G]) Spend(now Stamp, n int64) (from *Grant[G], ok bool) {
	if k.Available(now) < n {
		return nil, false
	}
	for i := 0; n > 0 && i < len(k.grants); i++ {
		g := &k.grants[i]
		if !g.live(now) {
			continue
		}
		take := min(g.Left, n)
		g.Left -= take
		n -= take
		from = g
	}
	return from, true
}

// Refund gives up to n units back to the key's live grants, never more
// than was spent from each (latest deadline first, so they stay usable
// longest), and reports how many it gave. It is a refund of hits this
// holder or another allowed in the current window (Envoy's
// is_negative_hits): the grant's window is the current one, and a grant
// never holds more than it was granted, so what is allowed less what is
// refunded stays within the limit, as for a refund through the log.
func (k *Key[G]) Refund(now Stamp, n int64) int64 {
	given := int64(0)
	for i := len(k.grants) - 1; i >= 0 && n > 0; i-- {
		g := &k.grants[i]
		if !now.Before(g.Deadline) {
			continue
		}
		give := min(n, g.Units-g.Left)
		g.Left += give
		n -= give
		given += give
	}
	return given
}

// Refusing reports whether the key is refused locally: its budget was
// found spent, and the recheck time has not come or the next request is
// in flight.
func (k *Key[G]) Refusing(now Stamp) bool {
	return k.dry && (now.Mono < k.refuseUntil || k.fetching)
}

// RetryAfter is how long a refused caller should wait (at least 1 ms).
func (k *Key[G]) RetryAfter(now Stamp) time.Duration {
	return max(time.Duration(k.retryAt-now.Mono), time.Millisecond)
}

// Want reports whether the key should ask for a grant now, for a hit of
// need units (0: a prefetch), and how many units: when what is held
// would last less than PrefetchAhead at the key's rate, or is less than
// need, or the newest grant is in its last 1/RenewDivisor. It asks once
// at a time: a true answer marks a request in flight, and the adapter
// must end it with Installed, Exhausted or Failed.
func (k *Key[G]) Want(now Stamp, need int64) (int64, bool) {
	if k.fetching || now.Mono < k.quietUntil {
		return 0, false
	}
	rate := k.Rate(now)
	have := k.Available(now)
	low := have < need || float64(have) < rate*k.cfg.PrefetchAhead.Seconds()+1
	if !low {
		var newest *Grant[G]
		for i := range k.grants {
			if k.grants[i].live(now) {
				newest = &k.grants[i]
			}
		}
		low = newest == nil || time.Duration(newest.Deadline.Mono-now.Mono) < newest.Usable/time.Duration(k.cfg.RenewDivisor)
	}
	if !low {
		return 0, false
	}
	k.fetching = true
	return k.cfg.Size(rate, need), true
}

// Fetching reports whether a request is in flight.
func (k *Key[G]) Fetching() bool { return k.fetching }

// Installed ends a request that brought units: a grant sent at sent
// (read just before the request left), usable for usable from then. It
// returns grants nobody will spend, to give back: the new one if it is
// already over (or not usable at all), or the one that gave way to it.
func (k *Key[G]) Installed(now, sent Stamp, id uint64, units int64, usable time.Duration, info G) []Grant[G] {
	k.fetching = false
	g := Grant[G]{ID: id, Left: units, Units: units, Deadline: sent.Add(usable), Usable: usable, Info: info}
	k.last, k.hasLast = info, true
	if usable <= 0 || !now.Before(g.Deadline) {
		return []Grant[G]{g}
	}
	at := len(k.grants)
	for at > 0 && k.grants[at-1].Deadline.Mono > g.Deadline.Mono {
		at--
	}
	k.grants = append(k.grants, Grant[G]{})
	copy(k.grants[at+1:], k.grants[at:])
	k.grants[at] = g
	var back []Grant[G]
	for len(k.grants) > k.cfg.MaxGrants {
		if k.grants[0].Left > 0 {
			back = append(back, k.grants[0])
		}
		k.grants = append(k.grants[:0], k.grants[1:]...)
	}
	k.dry, k.refuseUntil, k.quietUntil = false, 0, 0
	return back
}

// Exhausted ends a request that brought nothing: the budget has no room
// until retry from now (0: unknown). The key is refused locally for at
// most Recheck, then asks again.
func (k *Key[G]) Exhausted(now Stamp, retry time.Duration, info G) {
	k.fetching = false
	k.last, k.hasLast = info, true
	wait := k.cfg.RecheckIn(retry)
	if retry <= 0 {
		retry = wait
	}
	k.dry = true
	k.refuseUntil, k.quietUntil = now.Mono+int64(wait), now.Mono+int64(wait)
	k.retryAt = now.Mono + int64(retry)
}

// Failed ends a request that got no answer to use. If the grant applied
// and the answer was lost, its units stay spent until it expires:
// under-admission, never over.
func (k *Key[G]) Failed(now Stamp) {
	k.fetching = false
	k.quietUntil = now.Mono + int64(k.cfg.FailBackoff)
}

// Last is the information of the newest grant the key got (with units or
// not), for answers; ok is false before the first.
func (k *Key[G]) Last() (G, bool) { return k.last, k.hasLast }

// TakeExpired removes the grants whose deadline has passed on either
// clock and appends those with units left to dst (to give back: the
// promise never to spend them holds, and an early return can lift a
// token bucket's cap before the expiry).
func (k *Key[G]) TakeExpired(now Stamp, dst []Grant[G]) []Grant[G] {
	return k.take(dst, true, func(g *Grant[G]) bool { return !now.Before(g.Deadline) })
}

// TakeDrained removes the grants with nothing left and appends them to
// dst (a token bucket stays capped by a grant until it is released).
func (k *Key[G]) TakeDrained(dst []Grant[G]) []Grant[G] {
	return k.take(dst, false, func(g *Grant[G]) bool { return g.Left == 0 })
}

// take removes the grants drop names, appending them to dst (only those
// with units left when unspentOnly).
func (k *Key[G]) take(dst []Grant[G], unspentOnly bool, drop func(*Grant[G]) bool) []Grant[G] {
	rest := k.grants[:0]
	for i := range k.grants {
		g := k.grants[i]
		if drop(&g) {
			if !unspentOnly || g.Left > 0 {
				dst = append(dst, g)
			}
			continue
		}
		rest = append(rest, g)
	}
	clear(k.grants[len(rest):])
	k.grants = rest
	return dst
}

// Idle reports whether the key has had no hit for CoolAfter and no
// request is in flight: its units should go back.
func (k *Key[G]) Idle(now Stamp) bool {
	return !k.fetching && now.Mono-k.lastHit >= int64(k.cfg.CoolAfter)
}

// Retire removes every grant and appends those with units left to dst.
func (k *Key[G]) Retire(dst []Grant[G]) []Grant[G] {
	return k.take(dst, true, func(*Grant[G]) bool { return true })
}

// Held is what live grants hold now, and whether any grant is live.
func (k *Key[G]) Held(now Stamp) (units int64, live bool) {
	for i := range k.grants {
		if now.Before(k.grants[i].Deadline) {
			live = true
			units += k.grants[i].Left
		}
	}
	return units, live
}
