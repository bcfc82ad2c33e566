package grpcserve

import "sync"

// Budget counts what callers hold (streams, a quota stream's buckets) in
// total and per credential, and refuses more past either bound.
type Budget struct {
	total, perKey int

	mu    sync.Mutex
	held  int
	byKey map[string]int
}

// NewBudget bounds holdings to total, perKey of them for one key.
func NewBudget(total, perKey int) *Budget {
	return &Budget{total: total, perKey: perKey, byKey: map[string]int{}}
}

// Which bound refused a Take.
const (
	FullNode       = "node"
	FullCredential = "credential"
)

// Take takes one for key; it returns "" when it did, else which bound is
// full (FullNode, FullCredential) and takes nothing.
func (b *Budget) Take(key string) (full string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.held >= b.total:
		return FullNode
	case b.byKey[key] >= b.perKey:
		return FullCredential
	}
	b.held++
	b.byKey[key]++
	return ""
}

// Release gives back n that key took.
func (b *Budget) Release(key string, n int) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held -= n
	if b.byKey[key] -= n; b.byKey[key] <= 0 {
		delete(b.byKey, key)
	}
}

// Held is what is held now.
func (b *Budget) Held() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held
}
