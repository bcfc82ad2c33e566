package lease

import (
	"fmt"
	"math"
	"time"
)

// Config holds the parameters in which holders differ (a node, an
// application, an Envoy stream); the algorithm that reads them is one.
// DESIGN.md gives the reasons for each holder's values.
type Config struct {
	// MinWant and MaxWant bound the units one request asks for (a hit
	// that costs more asks for its cost).
	MinWant, MaxWant int64
	// Horizon sizes a request: what the key's rate spends in this long.
	Horizon time.Duration
	// PrefetchAhead: ask for more when what is held would last less than
	// this at the key's rate, so a busy key never waits on the cluster.
	PrefetchAhead time.Duration
	// RenewDivisor: ask for more when the newest grant has less than
	// 1/RenewDivisor of its usable time left.
	RenewDivisor int64
	// Recheck: after a grant of nothing (the budget is spent) the key is
	// refused locally for at most this long (less if the budget has room
	// sooner), then the cluster is asked again: others may have given
	// units back.
	Recheck time.Duration
	// FailBackoff: after a request failed, ask no more for this long
	// (hits are not refused meanwhile: they go to the cluster).
	FailBackoff time.Duration
	// CoolAfter: a key with no hit for this long is idle; its units go
	// back to the cluster.
	CoolAfter time.Duration
	// MaxGrants is how many grants one key holds at once (the one being
	// spent, a prefetched one, one of the next window...); past it the
	// grant that ends first gives way and is given back.
	MaxGrants int
}

// Size is how many units to ask for at rate units per second, for a hit
// of need units (0: a prefetch): what the rate spends in Horizon, within
// MinWant and MaxWant, and at least need.
func (c Config) Size(rate float64, need int64) int64 {
	want := int64(math.Min(math.Ceil(rate*c.Horizon.Seconds()), float64(c.MaxWant)))
	return max(min(max(want, c.MinWant), c.MaxWant), need)
}

// RenewIn is when to ask again for a grant usable for usable from now: in
// its last 1/RenewDivisor.
func (c Config) RenewIn(usable time.Duration) time.Duration {
	return usable - usable/time.Duration(c.RenewDivisor)
}

// RecheckIn is how long a spent budget is refused locally before the
// cluster is asked again, when it has room again in retry (0: unknown):
// Recheck at most.
func (c Config) RecheckIn(retry time.Duration) time.Duration {
	if retry <= 0 {
		return c.Recheck
	}
	return min(retry, c.Recheck)
}

// ratePeriod is how often a key's demand rate is refreshed.
const ratePeriod = 250 * time.Millisecond

// Validate says what is wrong with c, if anything.
func (c Config) Validate() error {
	switch {
	case c.MinWant < 1 || c.MaxWant < c.MinWant:
		return fmt.Errorf("lease config: want bounds %d..%d: need 1 <= min <= max", c.MinWant, c.MaxWant)
	case c.Horizon <= 0 || c.PrefetchAhead < 0 || c.RenewDivisor < 1:
		return fmt.Errorf("lease config: horizon %s, prefetch %s, renew 1/%d: need a positive horizon and divisor", c.Horizon, c.PrefetchAhead, c.RenewDivisor)
	case c.Recheck < 0 || c.FailBackoff < 0 || c.CoolAfter < 0:
		return fmt.Errorf("lease config: recheck %s, backoff %s, cool-down %s: none may be negative", c.Recheck, c.FailBackoff, c.CoolAfter)
	case c.MaxGrants < 1:
		return fmt.Errorf("lease config: %d grants per key: need at least 1", c.MaxGrants)
	}
	return nil
}

// NodeConfig is a node's: its round trip to the leader is one hop inside
// the cluster, so it asks late (250 ms of demand ahead) for about a
// second's demand, at least 2 units (a warm key's lease is small), and
// gives back after 1 s without a hit.
func NodeConfig() Config {
	return Config{MinWant: 2, MaxWant: 1 << 40, Horizon: time.Second, PrefetchAhead: 250 * time.Millisecond,
		RenewDivisor: 4, Recheck: 50 * time.Millisecond, FailBackoff: 50 * time.Millisecond, CoolAfter: time.Second,
		MaxGrants: 4}
}

// AppConfig is an application's (client.Local): its round trip crosses
// a network and maybe a load balancer, so it asks early (half a lease of
// demand ahead, or a third of the lease left) for a lease's worth of
// demand, at most 100 units (an application's grant that dies with it
// is lost to every other holder until it expires), holds at most 3
// grants, and keeps a key 2 s after its last hit.
func AppConfig(lease time.Duration) Config {
	return Config{MinWant: 1, MaxWant: 100, Horizon: lease, PrefetchAhead: lease / 2, RenewDivisor: 3,
		Recheck: 250 * time.Millisecond, FailBackoff: 100 * time.Millisecond, CoolAfter: 2 * time.Second, MaxGrants: 3}
}

// EnvoyConfig is an Envoy quota stream's (rlqs): Envoy decides from the
// assignment, the stream only renews it, so it sizes a grant from the
// rate Envoy reported over one lease (1 unit at least, a lease's demand
// at most what a policy could allow), renews in the grant's last third
// (an assignment travels to Envoy and back as a report), and after a spent
// budget denies and asks again when the window has room, in 50 ms at
// least and one lease at most.
func EnvoyConfig(lease time.Duration, maxWant int64) Config {
	return Config{MinWant: 1, MaxWant: maxWant, Horizon: lease, PrefetchAhead: lease / 2, RenewDivisor: 3,
		Recheck: lease, FailBackoff: 50 * time.Millisecond, CoolAfter: 30 * time.Second, MaxGrants: 1}
}

// Threshold is how many hits in two tracker periods make a key hot, given
// the load on the commit path: hot while the path carries at most
// busyRate hits per second, and falling in proportion as the load rises
// above it, down to warm. Each key leased instead of logged takes its
// hits off the log; what it costs is the units its grants hold that
// the key does not spend before they go back (DESIGN.md).
func Threshold(hot, warm int, logRate, busyRate float64) int {
	if warm >= hot || busyRate <= 0 || logRate <= busyRate {
		return hot
	}
	return max(int(float64(hot)*busyRate/logRate), warm)
}
