package httpapi

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/wire"
)

// errCredentialGrants: the caller's credential holds its share of grants
// on this node (429 credential_budget; another credential still gets its
// first).
var errCredentialGrants = errors.New("this credential holds its share of grants")

// holderGrants counts the grants each external holder has outstanding
// through this node, so that one holder cannot pin the cluster's memory
// with grants: at most max at a time per holder and node (a holder that
// spreads its requests over n nodes holds at most n × max), and at most
// maxPerCred per credential and node over all its holder ids (a caller
// cannot dodge the first bound by naming new holders).
type holderGrants struct {
	max, maxPerCred int

	mu       sync.Mutex
	byHolder map[string]map[uint64]time.Time // grant id -> expiry on this node's clock
	pending  map[string]int                  // requests in flight
	credOf   map[string]string               // holder -> its credential
	byCred   map[string]int                  // grants outstanding and in flight per credential
	swept    time.Time
}

func newHolderGrants(max, maxPerCred int) *holderGrants {
	return &holderGrants{max: max, maxPerCred: maxPerCred, byHolder: map[string]map[uint64]time.Time{}, pending: map[string]int{},
		credOf: map[string]string{}, byCred: map[string]int{}}
}

// count moves holder's credential's count by n.
func (h *holderGrants) count(holder string, n int) {
	cred, ok := h.credOf[holder]
	if !ok {
		return
	}
	if h.byCred[cred] += n; h.byCred[cred] <= 0 {
		delete(h.byCred, cred)
	}
	if len(h.byHolder[holder]) == 0 && h.pending[holder] == 0 {
		delete(h.credOf, holder)
	}
}

// reserve makes room for one more grant of holder, or says why not.
// release records what the request got (a grant with no units holds
// nothing).
func (h *holderGrants) reserve(cred, holderID string) (release func(g cluster.Grant), err error) {
	holder := cred + "\x00" + holderID // one credential's holder: anonymous callers may share ids
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
	if n := h.byCred[cred]; n >= h.maxPerCred {
		return nil, fmt.Errorf("%w: credential %s has %d grants outstanding over its holders, the most one credential may have on this node; return units or wait for grants to expire", errCredentialGrants, cred, n)
	}
	h.pending[holder]++
	h.credOf[holder] = cred
	h.byCred[cred]++
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
			if _, dup := m[g.ID]; !dup {
				m[g.ID] = now.Add(g.Valid)
				return // the request's count is the grant's now
			}
		}
		h.count(holder, -1)
	}, nil
}

// forget drops a grant its holder returned.
func (h *holderGrants) forget(cred, holderID string, id uint64) {
	holder := cred + "\x00" + holderID
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.byHolder[holder][id]; !ok {
		return
	}
	delete(h.byHolder[holder], id)
	if len(h.byHolder[holder]) == 0 {
		delete(h.byHolder, holder)
	}
	h.count(holder, -1)
}

// prune drops holder's expired grants; h.mu is held.
func (h *holderGrants) prune(holder string, now time.Time) {
	m := h.byHolder[holder]
	dropped := 0
	for id, exp := range m {
		if !now.Before(exp) {
			delete(m, id)
			dropped++
		}
	}
	if len(m) == 0 {
		delete(h.byHolder, holder)
	}
	if dropped > 0 {
		h.count(holder, -dropped)
	}
}
