package rlqs

import (
	"sync"
	"time"
)

// grantBudget is the node's budget of grant log entries per second for
// its quota streams, shared evenly between them so that quota traffic
// can never crowd out hits: the node as a whole writes at most rate
// entries a second (plus one second's burst), and each of n open streams
// earns rate/n a second for itself (keeping up to one second of it, at
// least one entry), so a stream that asks for more than its share waits
// while the others still get theirs. A stream that finds no entry
// renews nothing this round and asks again on its next tick; its
// buckets' assignments run out meanwhile if that takes too long, and
// Envoy's expired behaviour applies.
type grantBudget struct {
	rate float64

	mu      sync.Mutex
	node    tokens
	holders map[string]*tokens
}

// tokens is a token bucket's level and when it was last filled.
type tokens struct {
	level float64
	at    time.Time
}

func (t *tokens) fill(now time.Time, rate, burst float64) {
	if !t.at.IsZero() {
		t.level += now.Sub(t.at).Seconds() * rate
	}
	t.level, t.at = min(t.level, burst), now
}

func newGrantBudget(rate float64) *grantBudget {
	now := time.Now()
	return &grantBudget{rate: rate, node: tokens{level: max(rate, 1), at: now}, holders: map[string]*tokens{}}
}

// join makes holder one of the streams that share the budget; leave
// takes it out again. A new holder starts with one entry, for its first
// report's assignments.
func (b *grantBudget) join(holder string) { b.joinAt(holder, time.Now()) }

func (b *grantBudget) joinAt(holder string, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.holders[holder] = &tokens{level: 1, at: now}
}

func (b *grantBudget) leave(holder string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.holders, holder)
}

// take spends one entry of holder's share and of the node's budget, or
// reports false and spends nothing.
func (b *grantBudget) take(holder string) bool { return b.takeAt(holder, time.Now()) }

func (b *grantBudget) takeAt(holder string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	h := b.holders[holder]
	if h == nil {
		return false
	}
	share := b.rate / float64(len(b.holders))
	h.fill(now, share, max(share, 1))
	b.node.fill(now, b.rate, max(b.rate, 1))
	if h.level < 1 || b.node.level < 1 {
		return false
	}
	h.level--
	b.node.level--
	return true
}
