package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/rlnode/rlnode/internal/wire"
	"github.com/rlnode/rlnode/lease"
)

// ErrNotLeased: the policy is strict (every hit through the log), so the
// cluster grants no leases for it; use Check.
var ErrNotLeased = errors.New("rlnode: the policy is not leased")

// ErrTooManyGrants: the holder already has as many outstanding grants as
// the cluster allows one holder; return some first.
var ErrTooManyGrants = errors.New("rlnode: the holder has too many outstanding grants")

// Grant is a lease of units of one key's budget to one holder. The units
// count as spent in the cluster the moment they are granted; the holder may
// spend them alone until Deadline, never after, and only in the window the
// grant belongs to.
type Grant struct {
	Policy string
	Key    string
	Holder string
	// ID names the grant in the cluster (the log index that made it);
	// returns name it.
	ID uint64
	// Units is what the cluster granted: up to the units asked for, 0 when
	// the key's budget is spent (then RetryAfter says for how long).
	Units int64
	// Limit and Window describe the policy's limit the grant was cut from;
	// WindowStart is zero for a token bucket.
	Limit       int64
	Window      time.Duration
	WindowStart time.Time
	ResetAt     time.Time
	// RetryAfter is set when fewer units than asked for were granted.
	RetryAfter time.Duration
	// ValidFor is how long the grant may be used, counted from Sent. The
	// cluster has already taken its safety margin off (clock rate error,
	// and for a token bucket the cluster's max-clock-offset); 0 with units
	// means the grant is too short to use: return it.
	ValidFor time.Duration
	// Sent is when this holder sent the request, on its own monotonic
	// clock: the lease clock starts here, before the cluster decided, so
	// the holder's deadline is never later than the cluster's.
	Sent time.Time
}

// Deadline is when the holder must stop spending the grant: Sent plus
// ValidFor, on both of this process's clocks. Ask it with a fresh
// time.Now() on every decision (Deadline().Passed(time.Now()),
// Deadline().Left(time.Now())): it has passed once either the monotonic
// or the wall clock reaches it, so a paused process or a suspended
// machine wakes up with nothing to spend.
func (g Grant) Deadline() lease.Deadline { return lease.DeadlineAfter(g.Sent, g.ValidFor) }

// wireLease is the lease API's request and answer (lease's one
// declaration, which the node reads too).
type wireLease = lease.Body

// Lease asks the cluster for up to want units of key's budget under a
// leased policy, usable for up to lease (0: the cluster's default), for holder (an id this application instance chose; the
// cluster scopes it by the token or client certificate that asks, so only
// the same credentials can return its units). Most applications use Local,
// which calls this for them.
func (c *Client) Lease(ctx context.Context, policy, key, holder string, want int64, lease time.Duration) (Grant, error) {
	if key == "" || holder == "" {
		return Grant{}, &Error{kind: ErrInvalid, Detail: "key and holder must not be empty"}
	}
	if want < 1 {
		return Grant{}, &Error{kind: ErrInvalid, Detail: fmt.Sprintf("want %d: ask for at least 1 unit", want)}
	}
	if policy == "" {
		policy = "default"
	}
	body, err := json.Marshal(wireLease{Policy: policy, Client: key, Holder: holder, Want: want, LeaseMs: lease.Milliseconds()})
	if err != nil {
		return Grant{}, &Error{kind: ErrInvalid, cause: err}
	}
	// The lease clock starts before the first byte leaves: a retry on
	// another node only makes the deadline earlier than it could be.
	sent := time.Now()
	a, err := c.call(ctx, http.MethodPost, wire.LeasesPath, body, http.StatusOK)
	if err != nil {
		return Grant{}, err
	}
	var w wireLease
	if err := json.Unmarshal(a.body, &w); err != nil || w.Units < 0 || w.ValidForMs < 0 {
		if err == nil {
			err = fmt.Errorf("units %d, validForMs %d", w.Units, w.ValidForMs)
		}
		// The units may have been granted; nobody will spend them, and
		// they come back when the grant expires.
		return Grant{}, &Error{Node: a.node, Status: a.status, kind: ErrOutcomeUnknown, cause: fmt.Errorf("decode lease: %w", err)}
	}
	return Grant{Policy: policy, Key: key, Holder: holder, ID: w.Grant, Units: w.Units, Limit: w.Limit, Window: ms(w.WindowMs),
		WindowStart: msTime(w.WindowStart), ResetAt: msTime(w.ResetAt), RetryAfter: ms(w.RetryAfterMs),
		ValidFor: ms(w.ValidForMs), Sent: sent}, nil
}

// ReturnLease gives back units of g the holder has not spent and promises
// never to spend; the cluster puts them back into the key's budget if g's
// window is still open. Returning after the deadline is harmless.
func (c *Client) ReturnLease(ctx context.Context, g Grant, units int64) error {
	if units < 1 {
		return nil
	}
	body, err := json.Marshal(wireLease{Policy: g.Policy, Client: g.Key, Holder: g.Holder, Grant: g.ID, Units: units})
	if err != nil {
		return &Error{kind: ErrInvalid, cause: err}
	}
	_, err = c.call(ctx, http.MethodPost, wire.LeaseReturnPath, body, http.StatusOK, http.StatusNoContent)
	return err
}
