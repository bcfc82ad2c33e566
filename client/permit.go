package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// Permit and reservation paths of the public API.
const (
	PermitsPath      = "/v1/permits"
	ReservationsPath = "/v1/reservations"
)

// Errors of permits and reservations.
var (
	// ErrNotFound: the id names no live permit or reservation of this
	// client's credential (never made, released, expired, or another's).
	ErrNotFound = errors.New("rlnode: no such permit or reservation")
	// ErrAlreadySettled: the reservation was settled before.
	ErrAlreadySettled = errors.New("rlnode: the reservation is already settled")
	// ErrClusterUpgrading: some member of the cluster runs a release that
	// cannot apply permits or reservations yet; nothing was taken.
	ErrClusterUpgrading = errors.New("rlnode: the cluster is being upgraded")
)

// Permit is one concurrency permit of a key.
type Permit struct {
	// ID names the permit in Release and Renew; empty when not Acquired.
	ID     string
	Policy string
	Key    string
	// Acquired: the key had fewer than the limit live. When false,
	// RetryAfter says when its earliest permit ends.
	Acquired   bool
	RetryAfter time.Duration
	// ExpiresAt is when the permit ends unless renewed (cluster time).
	ExpiresAt time.Time
	// Live is how many permits the key holds now, Limit the policy's.
	Live, Limit int64
}

type wirePermit struct {
	Permit       string `json:"permit"`
	Policy       string `json:"policy"`
	Client       string `json:"client"`
	ExpiresAtMs  int64  `json:"expiresAtMs"`
	Live         int64  `json:"live"`
	Limit        int64  `json:"limit"`
	RetryAfterMs int64  `json:"retryAfterMs"`
}

func ttlString(ttl time.Duration) string {
	if ttl <= 0 {
		return ""
	}
	return ttl.String()
}

// Acquire takes a permit of key under a concurrency policy for ttl (0:
// the cluster's default, 30s). A full key is not an error: the Permit is
// not Acquired and says when to retry. Release the permit when the work is
// done; one never released ends at its TTL (a crashed holder leaks nothing
// for longer). An error matching ErrOutcomeUnknown means a permit may have
// been taken that the caller does not know: it ends at its TTL.
func (c *Client) Acquire(ctx context.Context, policy, key string, ttl time.Duration) (Permit, error) {
	body := struct {
		Policy string `json:"policy"`
		Client string `json:"client"`
		TTL    string `json:"ttl,omitempty"`
	}{policy, key, ttlString(ttl)}
	var w wirePermit
	a, err := c.callJSON(ctx, http.MethodPost, PermitsPath, body, &w, "permit", http.StatusCreated, http.StatusTooManyRequests)
	if err != nil {
		return Permit{}, err
	}
	p := Permit{ID: w.Permit, Policy: policy, Key: key, Live: w.Live, Limit: w.Limit, Acquired: a.status == http.StatusCreated}
	if p.Acquired {
		p.ExpiresAt = time.UnixMilli(w.ExpiresAtMs)
	} else {
		p.RetryAfter = ms(w.RetryAfterMs)
	}
	return p, nil
}

// Release ends the permit id. ErrNotFound when it had ended already (or
// was never this credential's).
func (c *Client) Release(ctx context.Context, id string) error {
	_, err := c.call(ctx, http.MethodDelete, PermitsPath+"/"+url.PathEscape(id), nil, http.StatusOK)
	return err
}

// Renew extends the permit id to ttl from now (never shortens it).
func (c *Client) Renew(ctx context.Context, id string, ttl time.Duration) (Permit, error) {
	body := struct {
		TTL string `json:"ttl,omitempty"`
	}{ttlString(ttl)}
	var w wirePermit
	if _, err := c.callJSON(ctx, http.MethodPost, PermitsPath+"/"+url.PathEscape(id)+"/renew", body, &w, "permit", http.StatusOK); err != nil {
		return Permit{}, err
	}
	return Permit{ID: w.Permit, Policy: w.Policy, Key: w.Client, Acquired: true, ExpiresAt: time.UnixMilli(w.ExpiresAtMs),
		Live: w.Live, Limit: w.Limit}, nil
}

// ReserveKey asks for Units of Key under Policy.
type ReserveKey struct {
	Policy string `json:"policy"`
	Key    string `json:"client"`
	Units  int64  `json:"units"`
}

// ReservedKey is the decision on one key of a reservation.
type ReservedKey struct {
	Policy       string `json:"policy"`
	Key          string `json:"client"`
	Units        int64  `json:"units"`
	Allowed      bool   `json:"allowed"`
	Remaining    int64  `json:"remaining"`
	ResetAtMs    int64  `json:"resetAt"`
	RetryAfterMs int64  `json:"retryAfterMs"`
}

// Reservation is units charged up front, to be settled at the real cost.
type Reservation struct {
	// ID names the reservation in Settle; empty when not Reserved.
	ID string
	// Reserved: every key had room and all were charged. When false none
	// was, and RetryAfter says when the fullest key has room again.
	Reserved   bool
	RetryAfter time.Duration
	// ExpiresAt: a reservation not settled by then stays charged in full.
	ExpiresAt time.Time
	Keys      []ReservedKey
}

// Settlement is what a settle did: Units is the actual cost settled at,
// the rest per key in the reservation's order (Reserved: the units it had
// charged).
type Settlement struct {
	Units     int64   `json:"units"`
	Reserved  []int64 `json:"reserved"`
	Refunded  []int64 `json:"refunded"`
	Charged   []int64 `json:"charged"`
	Overdraft int64   `json:"overdraft"`
}

// Reserve charges every key's units at once, all or nothing (an LLM
// call's estimated tokens on a per-minute and a per-day policy, say), for
// ttl (0: 30s). Settle it with the real cost when the work is done.
func (c *Client) Reserve(ctx context.Context, ttl time.Duration, keys ...ReserveKey) (Reservation, error) {
	body := struct {
		Keys []ReserveKey `json:"keys"`
		TTL  string       `json:"ttl,omitempty"`
	}{keys, ttlString(ttl)}
	var w struct {
		Reservation  string        `json:"reservation"`
		ExpiresAtMs  int64         `json:"expiresAtMs"`
		Keys         []ReservedKey `json:"keys"`
		RetryAfterMs int64         `json:"retryAfterMs"`
	}
	a, err := c.callJSON(ctx, http.MethodPost, ReservationsPath, body, &w, "reservation", http.StatusCreated, http.StatusTooManyRequests)
	if err != nil {
		return Reservation{}, err
	}
	r := Reservation{ID: w.Reservation, Reserved: a.status == http.StatusCreated, Keys: w.Keys, RetryAfter: ms(w.RetryAfterMs)}
	if r.Reserved {
		r.ExpiresAt = time.UnixMilli(w.ExpiresAtMs)
	}
	return r, nil
}

// Settle settles reservation id at the units actually used: the rest is
// given back to the window it was charged in, or the extra is charged
// (never refused: Overdraft reports what no limit had room for).
func (c *Client) Settle(ctx context.Context, id string, units int64) (Settlement, error) {
	body := struct {
		Units int64 `json:"units"`
	}{units}
	var s Settlement
	if _, err := c.callJSON(ctx, http.MethodPost, ReservationsPath+"/"+url.PathEscape(id)+"/settle", body, &s, "settlement", http.StatusOK); err != nil {
		return Settlement{}, err
	}
	return s, nil
}

// callJSON is call with in sent as JSON and the answer's body decoded into
// out; an answer that does not decode is ErrOutcomeUnknown (the node may
// have acted on the request), naming what was expected.
func (c *Client) callJSON(ctx context.Context, method, path string, in, out any, what string, ok ...int) (answer, error) {
	body, err := json.Marshal(in)
	if err != nil {
		return answer{}, &Error{kind: ErrInvalid, cause: err}
	}
	a, err := c.call(ctx, method, path, body, ok...)
	if err != nil {
		return a, err
	}
	if err := json.Unmarshal(a.body, out); err != nil {
		return a, &Error{Node: a.node, Status: a.status, kind: ErrOutcomeUnknown, cause: fmt.Errorf("decode %s: %w", what, err)}
	}
	return a, nil
}
