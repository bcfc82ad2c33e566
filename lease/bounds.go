package lease

import "time"

// The lease bounds, in one place: the log's decoder (fsm), the lease API
// (httpapi), the Go client and the quota service (rlqs) all read them
// here.
const (
	// DefaultLeaseMs is the lease a holder asks for when it names none,
	// in the wire's unit; DefaultLease the same as a Duration.
	DefaultLeaseMs = 2000
	DefaultLease   = DefaultLeaseMs * time.Millisecond
	// MaxLease is the longest lease a grant may ask for. It bounds how
	// long a lowered limit or a deleted policy can still be exceeded by
	// units granted before the change, and how long a vanished holder's
	// units are lost to everyone.
	MaxLease = MaxLeaseMs * time.Millisecond
	// MaxLeaseMs is MaxLease in the wire's (and the log's) unit.
	MaxLeaseMs = 60_000
	// MaxHolderLen is the longest holder id the log takes: a node's id,
	// or an external holder's id with the scope the node puts in front
	// of it ("app:<scope>:", "rlqs:<scope>:").
	MaxHolderLen = 256
	// MaxAppHolderLen is the longest id an application may choose for
	// itself (the lease API's holder field): the node's scope prefix
	// (under 40 bytes) still fits within MaxHolderLen.
	MaxAppHolderLen = 128
)

// The margin a holder's deadline keeps before the grant's expiry: clock
// rate error and a fixed part for whole-ms stamping and timer
// granularity. Rate: NTP slews a clock by up to 500 ppm, the leader's and
// the holder's may be slewed in opposite directions, and cluster time may
// slew toward the leader's wall clock by another 500 ppm
// (cluster/clock.go), so 1500 ppm of the lease. For a 2 s lease that is
// 8 ms.
const (
	MarginPPM   = 1500
	MarginFixed = 5 * time.Millisecond
)

func margin(d time.Duration) time.Duration { return d/1_000_000*MarginPPM + MarginFixed }

// UsableFor is how long after sending its request a holder may spend a
// grant valid for valid (from the grant entry's time to its expiry, in
// cluster time): valid less the margin, and less the cluster's maximum
// clock offset wherever the grant ends with what cluster time may be
// moved against. A token bucket's cap lifts at the expiry; a fixed or
// sliding window's units belong to a window that ends toWindowEnd after
// the entry (0: no allowance there). Cluster time never steps while a
// grant is outstanding (cluster/clock.go), but a leader of an earlier
// release (a rolling upgrade) still moves it to its own clock, by up to
// that bound, when it takes over: the leader passes toWindowEnd while
// some voter may be such a release. 0 or less: not usable at all.
func UsableFor(valid time.Duration, bucket bool, toWindowEnd, maxClockOffset time.Duration) time.Duration {
	d := valid - margin(valid)
	switch {
	case bucket:
		d -= maxClockOffset
	case toWindowEnd > 0:
		d = min(d, toWindowEnd-margin(toWindowEnd)-maxClockOffset)
	}
	return d
}

// Body is the lease API's JSON body (POST /v1/leases and
// /v1/leases/return), request and answer alike: the node (httpapi) and
// the Go client read and write this one declaration.
type Body struct {
	Policy       string `json:"policy"`
	Client       string `json:"client"`
	Holder       string `json:"holder"`
	Grant        uint64 `json:"grant,omitempty"`
	Want         int64  `json:"want,omitempty"`
	LeaseMs      int64  `json:"leaseMs,omitempty"`
	Units        int64  `json:"units,omitempty"`
	Limit        int64  `json:"limit,omitempty"`
	WindowMs     int64  `json:"windowMs,omitempty"`
	WindowStart  int64  `json:"windowStart,omitempty"`
	ResetAt      int64  `json:"resetAt,omitempty"`
	RetryAfterMs int64  `json:"retryAfterMs,omitempty"`
	ValidForMs   int64  `json:"validForMs,omitempty"`
}

// Answer is a grant's 200 body: units and validForMs are always present
// (0 units means the key's budget is spent). It reads as a Body.
type Answer struct {
	Policy       string `json:"policy"`
	Client       string `json:"client"`
	Holder       string `json:"holder"`
	Grant        uint64 `json:"grant"`
	Units        int64  `json:"units"`
	Limit        int64  `json:"limit"`
	WindowMs     int64  `json:"windowMs"`
	WindowStart  int64  `json:"windowStart,omitempty"`
	ResetAt      int64  `json:"resetAt"`
	RetryAfterMs int64  `json:"retryAfterMs,omitempty"`
	ValidForMs   int64  `json:"validForMs"`
}
