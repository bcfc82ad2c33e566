// Package wire is the part of rlnode's public HTTP API that the router
// (httpapi) and the Go client (client) both speak: the check API's and the
// reads' paths and JSON bodies, declared once so that the two cannot
// drift apart (they had two copies of the check answer that differed in
// five tags). It is stdlib only and holds no behaviour: the router decides
// what to answer, the client what to make of it. The lease API's body is
// the lease core's (lease.Body); the permit and reservation bodies live
// with their handlers (docs/budgets.md).
package wire

// Paths of the public API. A path that ends in a slash takes its
// arguments after it, escaped (url.PathEscape).
const (
	// CheckPath is GET /check/:client (the default policy) and
	// /check/:policy/:client; ?cost=N counts N.
	CheckPath = "/check/"
	// CheckManyPath is POST /v1/check: several hits, all or nothing.
	CheckManyPath = "/v1/check"
	// PeekPath is GET /v1/status/:client and /v1/status/:policy/:client:
	// a key's state, read without counting.
	PeekPath = "/v1/status/"
	// WindowsPath is /v1/windows/:policy/:client: DELETE forgets the key,
	// POST writes its count (admin).
	WindowsPath = "/v1/windows"
	// PeersPath is GET /v1/cluster/peers: the servers of the latest
	// configuration, with their HTTP addresses and the leader.
	PeersPath = "/v1/cluster/peers"
	// LeasesPath and LeaseReturnPath are the lease API (body: lease.Body).
	LeasesPath      = "/v1/leases"
	LeaseReturnPath = "/v1/leases/return"
)

// CheckBody is a single check's answer (200, and inside the 429 problem
// document), one result of POST /v1/check, and a read's answer. limit,
// remaining, resetAt and windowMs describe the most constraining limit;
// limits has every limit in the policy's order.
type CheckBody struct {
	Allowed   bool   `json:"allowed"`
	Remaining int64  `json:"remaining"`
	ResetAt   int64  `json:"resetAt"`
	Limit     int64  `json:"limit"`
	WindowMs  int64  `json:"windowMs"`
	Policy    string `json:"policy"`
	Client    string `json:"client,omitempty"`
	// Limits is absent when the node refused before the log (no window
	// was read).
	Limits       []LimitBody `json:"limits,omitempty"`
	RetryAfterMs *int64      `json:"retryAfterMs,omitempty"`
	// Decided: "local" (from a lease the node holds) or "log".
	Decided string `json:"decided,omitempty"`
	// WouldRefuse: a shadow policy allowed a hit that enforcing would
	// have refused (X-Rlnode-Shadow: would-refuse on the answer).
	WouldRefuse bool `json:"wouldRefuse,omitempty"`
}

// LimitBody is one limit of a policy as a check left it. WindowStart is
// absent for a token bucket.
type LimitBody struct {
	Limit       int64  `json:"limit"`
	WindowMs    int64  `json:"windowMs"`
	Remaining   int64  `json:"remaining"`
	ResetAt     int64  `json:"resetAt"`
	WindowStart *int64 `json:"windowStart,omitempty"`
}

// Hit is one key of POST /v1/check. Cost absent means 1.
type Hit struct {
	Policy string `json:"policy"`
	Client string `json:"client"`
	Cost   *int64 `json:"cost,omitempty"`
}

// CheckManyRequest is POST /v1/check's body.
type CheckManyRequest struct {
	Hits []Hit `json:"hits"`
}

// CheckManyAnswer is POST /v1/check's answer (200 or 429): allowed only
// if every hit was, one result per hit in request order.
type CheckManyAnswer struct {
	Allowed bool        `json:"allowed"`
	Results []CheckBody `json:"results"`
	Decided string      `json:"decided"`
}
