package httpapi

import (
	"fmt"
	"sync"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/wire"
)

// holderGrants counts the grants each external holder has outstanding
// through this node, so that one holder cannot pin the cluster's memory
// with grants: at most max at a time per holder and node (a holder that
// spreads its requests over n nodes holds at most n × max).
type holderGrants struct {
	max int

	mu       sync.Mutex
	byHolder map[string]map[uint64]time.Time // grant id -> expiry on this node's clock
	pending  map[string]int                  // requests in flight
	swept    time.Time
}

func newHolderGrants(max int) *holderGrants {
	return &holderGrants{max: max, byHolder: map[string]map[uint64]time.Time{}, pending: map[string]int{}}
}

// reserve makes room for one more grant of holder, or says why not.
// release records what the request got (a grant with no units holds
// nothing).
func (h *holderGrants) reserve(holder string) (release func(g cluster.Grant), err error) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if now.Sub(h.swept) > 5*time.Second {
		h.swept = now
		for id := range h.byHolder {
			h.prune(id, now)
		}
	} else {
		h.prune(holder, now)
	}
	if n := len(h.byHolder[holder]) + h.pending[holder]; n >= h.max {
		return nil, fmt.Errorf("holder has %d grants outstanding, the most one holder may have on this node; return units it does not need (POST %s) or wait for grants to expire", n, wire.LeaseReturnPath)
	}
	h.pending[holder]++
	return func(g cluster.Grant) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.pending[holder]--; h.pending[holder] <= 0 {
			delete(h.pending, holder)
		}
		if g.Units > 0 && g.ID != 0 {
			m := h.byHolder[holder]
			if m == nil {
				m = map[uint64]time.Time{}
				h.byHolder[holder] = m
			}
			m[g.ID] = now.Add(g.Valid)
		}
	}, nil
}

// forget drops a grant its holder returned.
func (h *holderGrants) forget(holder string, id uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.byHolder[holder], id)
	if len(h.byHolder[holder]) == 0 {
		delete(h.byHolder, holder)
	}
}

// prune drops holder's expired grants; h.mu is held.
func (h *holderGrants) prune(holder string, now time.Time) {
	m := h.byHolder[holder]
	for id, exp := range m {
		if !now.Before(exp) {
			delete(m, id)
		}
	}
	if len(m) == 0 {
		delete(h.byHolder, holder)
	}
}
