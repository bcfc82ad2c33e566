package fsm

import (
	"cmp"
	"slices"
	"sort"
	"strings"
)

// expiryQueue is a FIFO of windows that share one window length. Windows are
// opened at non-decreasing applied times, so within one length they also
// lapse in order: expiry only ever looks at the front, never scans the map.
type expiryQueue struct {
	windowMs int64
	items    []expiryItem
	head     int
}

// expiryItem names a slot and the window start it was queued for; if the
// slot has since moved to a newer window (or another key), the item is stale
// and is dropped when it reaches the front.
type expiryItem struct {
	idx   uint32
	start int64
}

func (q *expiryQueue) push(idx uint32, start int64) {
	q.items = append(q.items, expiryItem{idx: idx, start: start})
}

func (q *expiryQueue) len() int { return len(q.items) - q.head }

func (q *expiryQueue) pop() {
	q.items[q.head] = expiryItem{}
	q.head++
	// Reclaim the consumed prefix once it dominates, keeping pops O(1)
	// amortized and memory proportional to live items.
	if q.head > 1024 && q.head*2 > len(q.items) {
		n := copy(q.items, q.items[q.head:])
		q.items = q.items[:n]
		q.head = 0
	}
}

func (f *FSM) queueFor(windowMs int64) *expiryQueue {
	i := sort.Search(len(f.expiry), func(i int) bool { return f.expiry[i].windowMs >= windowMs })
	if i < len(f.expiry) && f.expiry[i].windowMs == windowMs {
		return f.expiry[i]
	}
	q := &expiryQueue{windowMs: windowMs}
	f.expiry = append(f.expiry, nil)
	copy(f.expiry[i+1:], f.expiry[i:])
	f.expiry[i] = q
	return q
}

// expire deletes up to budget windows that have lapsed by now. It is a
// function of the applied state only, so replicas stay identical.
func (f *FSM) expire(now int64, budget int) {
	for _, q := range f.expiry {
		for budget > 0 && q.len() > 0 {
			it := q.items[q.head]
			if it.start+q.windowMs > now {
				break
			}
			q.pop()
			budget--
			s := &f.slab[it.idx]
			if s.key != "" && s.start == it.start && s.windowMs == q.windowMs {
				f.remove(it.idx)
			}
		}
	}
}

// rebuildExpiry recreates the queues after a restore, oldest window first
// (ties by key). It sorts compact (start, slot) pairs read in slab order, so
// most comparisons touch no slot; only equal starts look at the keys.
func (f *FSM) rebuildExpiry() {
	f.expiry = nil
	type item struct {
		start int64
		idx   uint32
	}
	order := make([]item, 0, len(f.index))
	for i := range f.slab {
		if f.slab[i].key != "" {
			order = append(order, item{f.slab[i].start, uint32(i)})
		}
	}
	slices.SortFunc(order, func(a, b item) int {
		if c := cmp.Compare(a.start, b.start); c != 0 {
			return c
		}
		return strings.Compare(f.slab[a.idx].key, f.slab[b.idx].key)
	})
	for _, it := range order {
		s := &f.slab[it.idx]
		f.queueFor(s.windowMs).push(it.idx, s.start)
	}
}
