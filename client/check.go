package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/rlnode/rlnode/internal/wire"
)

// Result is the decision for one hit.
type Result struct {
	// Allowed: the hit counted and may proceed.
	Allowed bool
	Policy  string
	Key     string
	// Limit, Window, Remaining and ResetAt describe the most constraining
	// of the policy's limits.
	Limit     int64
	Window    time.Duration
	Remaining int64
	ResetAt   time.Time
	// WindowStart is the start of the window the decision counted in
	// (fixed window: its anchored start; sliding window: the current
	// aligned window's start), when known: always for a decision made by
	// Local from a grant, and for a remote one of a single-limit policy;
	// zero for a token bucket.
	WindowStart time.Time
	// RetryAfter is how long until a hit of this cost could be allowed
	// (0 when allowed).
	RetryAfter time.Duration
	// Limits has one entry per limit of the policy, in the policy's order
	// (empty when the cluster does not report them).
	Limits []Limit
	// ServedBy is the id of the node whose log entry decided the hit.
	ServedBy string
	// WouldRefuse: the policy is in shadow mode and let through a hit
	// that enforcing would have refused (Allowed is true; Remaining and
	// ResetAt say why).
	WouldRefuse bool
}

// Limit is one limit of a policy as a decision left it.
type Limit struct {
	Limit     int64
	Window    time.Duration
	Remaining int64
	ResetAt   time.Time
	// WindowStart is zero for a token bucket.
	WindowStart time.Time
}

// Hit is one key of a CheckAll.
type Hit struct {
	Policy string `json:"policy"`
	Key    string `json:"client"`
	// Cost defaults to 1.
	Cost int64 `json:"cost,omitempty"`
}

// MultiResult is the decision of a CheckAll: all hits counted, or none.
type MultiResult struct {
	Allowed bool
	// Results has one entry per hit, in request order; when Allowed is
	// false they say which hits would have passed (nothing was spent).
	Results []Result
}

// resultOf reads a check's or a read's JSON body (200, or the 429
// problem document carrying the same members).
func resultOf(w wire.CheckBody, policy, key, servedBy string) Result {
	r := Result{Allowed: w.Allowed, Policy: w.Policy, Key: key, Limit: w.Limit, Window: ms(w.WindowMs),
		Remaining: w.Remaining, ResetAt: msTime(w.ResetAt), ServedBy: servedBy, WouldRefuse: w.WouldRefuse}
	if r.Policy == "" {
		r.Policy = policy
	}
	if w.RetryAfterMs != nil {
		r.RetryAfter = ms(*w.RetryAfterMs)
	}
	for _, l := range w.Limits {
		var start int64 // absent for a token bucket
		if l.WindowStart != nil {
			start = *l.WindowStart
		}
		r.Limits = append(r.Limits, Limit{Limit: l.Limit, Window: ms(l.WindowMs), Remaining: l.Remaining,
			ResetAt: msTime(l.ResetAt), WindowStart: msTime(start)})
	}
	if len(r.Limits) == 1 {
		r.WindowStart = r.Limits[0].WindowStart
	}
	return r
}

func ms(v int64) time.Duration { return time.Duration(v) * time.Millisecond }

func msTime(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v)
}

// checkPath is GET /check/:policy/:key; the default policy also has the
// shorter /check/:key, which every rlnode version serves.
func checkPath(policy, key string, cost int64) string {
	p := wire.CheckPath + url.PathEscape(key)
	if policy != "" && policy != "default" {
		p = wire.CheckPath + url.PathEscape(policy) + "/" + url.PathEscape(key)
	}
	if cost != 1 {
		p += "?cost=" + strconv.FormatInt(cost, 10)
	}
	return p
}

// Check counts one hit of cost (0 means 1) for key under policy. A refused
// hit is a Result with Allowed false and a nil error; an error means there
// was no decision (see the Err* values).
func (c *Client) Check(ctx context.Context, policy, key string, cost int64) (Result, error) {
	if cost == 0 {
		cost = 1
	}
	if key == "" {
		return Result{}, &Error{kind: ErrInvalid, Detail: "key is empty"}
	}
	if cost < 0 {
		return Result{}, &Error{kind: ErrInvalid, Detail: fmt.Sprintf("cost %d is negative", cost)}
	}
	a, err := c.call(ctx, http.MethodGet, checkPath(policy, key, cost), nil, http.StatusOK, http.StatusTooManyRequests)
	if err != nil {
		return Result{}, err
	}
	var w wire.CheckBody
	if err := json.Unmarshal(a.body, &w); err != nil {
		return Result{}, &Error{Node: a.node, Status: a.status, kind: ErrOutcomeUnknown, cause: fmt.Errorf("decode answer: %w", err)}
	}
	r := resultOf(w, policy, key, a.header.Get("X-Rlnode-Served-By"))
	if !r.Allowed && r.RetryAfter == 0 {
		if n, err := strconv.Atoi(a.header.Get("Retry-After")); err == nil {
			r.RetryAfter = time.Duration(n) * time.Second
		}
	}
	return r, nil
}

// CheckAll decides several hits in one log entry, all or nothing: allowed
// only if every hit is, and then every hit counts; otherwise none does (POST
// /v1/check, at most 64 hits).
func (c *Client) CheckAll(ctx context.Context, hits ...Hit) (MultiResult, error) {
	if len(hits) == 0 {
		return MultiResult{}, &Error{kind: ErrInvalid, Detail: "no hits"}
	}
	req := wire.CheckManyRequest{Hits: make([]wire.Hit, len(hits))}
	for i, h := range hits {
		req.Hits[i] = wire.Hit{Policy: h.Policy, Client: h.Key}
		if h.Cost != 0 {
			req.Hits[i].Cost = &hits[i].Cost
		}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return MultiResult{}, &Error{kind: ErrInvalid, cause: err}
	}
	a, err := c.call(ctx, http.MethodPost, wire.CheckManyPath, body, http.StatusOK, http.StatusTooManyRequests)
	if err != nil {
		return MultiResult{}, err
	}
	var w wire.CheckManyAnswer
	if err := json.Unmarshal(a.body, &w); err != nil || len(w.Results) != len(hits) {
		if err == nil {
			err = fmt.Errorf("%d results for %d hits", len(w.Results), len(hits))
		}
		return MultiResult{}, &Error{Node: a.node, Status: a.status, kind: ErrOutcomeUnknown, cause: fmt.Errorf("decode answer: %w", err)}
	}
	m := MultiResult{Allowed: w.Allowed, Results: make([]Result, len(hits))}
	served := a.header.Get("X-Rlnode-Served-By")
	for i, h := range hits {
		m.Results[i] = resultOf(w.Results[i], h.Policy, h.Key, served)
	}
	return m, nil
}

// Status is a key's state as a read sees it, without counting a hit.
type Status struct {
	Policy    string
	Key       string
	Limit     int64
	Window    time.Duration
	Remaining int64
	ResetAt   time.Time
	Limits    []Limit
	ServedBy  string
}

// Peek reads a key's state without counting (a linearizable read on the
// leader; GET /v1/status/:policy/:key).
func (c *Client) Peek(ctx context.Context, policy, key string) (Status, error) {
	if key == "" {
		return Status{}, &Error{kind: ErrInvalid, Detail: "key is empty"}
	}
	a, err := c.call(ctx, http.MethodGet, wire.PeekPath+url.PathEscape(policy)+"/"+url.PathEscape(key), nil, http.StatusOK)
	if err != nil {
		return Status{}, err
	}
	var w wire.CheckBody
	var served struct {
		ServedBy string `json:"servedBy"`
	}
	if err := json.Unmarshal(a.body, &w); err != nil {
		return Status{}, &Error{Node: a.node, Status: a.status, kind: ErrInvalid, cause: fmt.Errorf("decode answer: %w", err)}
	}
	_ = json.Unmarshal(a.body, &served)
	r := resultOf(w, policy, key, served.ServedBy)
	return Status{Policy: r.Policy, Key: key, Limit: r.Limit, Window: r.Window, Remaining: r.Remaining,
		ResetAt: r.ResetAt, Limits: r.Limits, ServedBy: r.ServedBy}, nil
}

// Reset forgets a key's state, so its next hit starts afresh (DELETE
// /v1/windows/:policy/:key; needs Config.Token when the cluster has one).
func (c *Client) Reset(ctx context.Context, policy, key string) error {
	if key == "" {
		return &Error{kind: ErrInvalid, Detail: "key is empty"}
	}
	_, err := c.call(ctx, http.MethodDelete, wire.WindowsPath+"/"+url.PathEscape(policy)+"/"+url.PathEscape(key), nil,
		http.StatusOK, http.StatusNoContent)
	return err
}
