package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// A grant forwarded to a leader that takes the request and answers nothing
// (a SIGSTOPped process, a frozen VM) would hold its caller, and the node
// holder's next grant after it, for the whole ApplyTimeout, although the
// other nodes elect a new leader within a few election timeouts. So a
// forwarded grant gets GrantAttemptTimeout: past it the attempt fails fast
// as not counted, and the next one waits until a new leader is known (or
// hungRetryAfter passes, for a leader that was only slow). A grant whose
// answer was lost this way may still apply on the old leader: its units
// count as spent and nobody spends them, until they expire (under-admission,
// never over). Only grants: a return or refund repeated is not the same
// write (a refund would come off twice).
const (
	GrantAttemptTimeout = 300 * time.Millisecond
	hungRetryAfter      = time.Second
)

// hungLeader remembers the leader that last failed to answer in time.
type hungLeader struct {
	mu sync.Mutex
	id string
	at time.Time
}

func (h *hungLeader) mark(id string) {
	h.mu.Lock()
	h.id, h.at = id, time.Now()
	h.mu.Unlock()
}

func (h *hungLeader) clear(id string) {
	h.mu.Lock()
	if h.id == id {
		h.id = ""
	}
	h.mu.Unlock()
}

// avoid reports whether id did not answer lately.
func (h *hungLeader) avoid(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return id != "" && id == h.id && time.Since(h.at) < hungRetryAfter
}

// forwardBounded runs call (a forward to the leader, which leader names)
// within GrantAttemptTimeout, first waiting for a new leader if the
// current one did not answer the last attempt.
func (h *hungLeader) forwardBounded(ctx context.Context, leader func() (id, httpAddr string), stop <-chan struct{}, call func(context.Context) error) error {
	id, _ := leader()
	for h.avoid(id) {
		select {
		case <-ctx.Done():
			return notCounted(nil, fmt.Errorf("leader %s did not answer within %s, and no other is known yet: %w", id, GrantAttemptTimeout, ctx.Err()))
		case <-stop:
			return notCounted(nil, ErrClosed)
		case <-time.After(20 * time.Millisecond):
		}
		id, _ = leader()
	}
	actx, cancel := context.WithTimeout(ctx, GrantAttemptTimeout)
	defer cancel()
	err := call(actx)
	if err != nil && ctx.Err() == nil && errors.Is(actx.Err(), context.DeadlineExceeded) {
		h.mark(id)
		return notCounted(nil, fmt.Errorf("leader %s did not answer within %s (if it applies the grant later, its units lapse unspent): %w", id, GrantAttemptTimeout, err))
	}
	if err == nil {
		h.clear(id)
	}
	return err
}
