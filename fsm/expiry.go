package fsm

import (
	"cmp"
	"slices"
	"strings"
)

// expiryHeap is a min-heap of (time, slot): every stored key has exactly one
// item, pushed when the key is created. A key's expiry may move later
// without touching the heap; when its item comes due the key is either dead
// (freed) or pushed again at its current expiry. So expiry never scans, and
// the heap holds one item per key whatever the traffic. Written out rather
// than with container/heap, whose interface boxes every pushed item.
type expiryHeap []expiryItem

type expiryItem struct {
	at  int64
	idx uint32
}

func (h *expiryHeap) push(at int64, idx uint32) {
	*h = append(*h, expiryItem{at: at, idx: idx})
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if s[p].at <= s[i].at {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

func (h *expiryHeap) pop() expiryItem {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < len(s) && s[l].at < s[m].at {
			m = l
		}
		if r := l + 1; r < len(s) && s[r].at < s[m].at {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// expire frees up to budget keys that no longer affect any decision at now
// (lapsed, reset, or of a deleted policy). Which dead keys are freed first
// does not matter: a dead key decides as absent and is left out of digests
// and snapshots, so replicas agree whatever their expiry progress.
func (f *FSM) expire(now int64, budget int) {
	for ; budget > 0 && len(f.heap) > 0 && f.heap[0].at <= now; budget-- {
		it := f.heap.pop()
		s := f.slab.At(it.idx)
		if f.alive(s, now) {
			f.heap.push(s.exp, it.idx)
			continue
		}
		f.remove(it.idx)
	}
}

// sweep visits up to budget slots after a policy was deleted and frees the
// keys of dead epochs from the key map, leaving a tombstone (an empty key)
// that expire frees when its heap item comes due. So a deleted policy's keys
// go within a few entries even when their windows are long, at bounded work
// per entry. Which keys go first does not matter: they are dead already.
func (f *FSM) sweep(budget int) {
	if f.slab.Len() == 0 {
		f.sweepLeft = 0
	}
	for ; f.sweepLeft > 0 && budget > 0; f.sweepLeft, budget = f.sweepLeft-1, budget-1 {
		if f.sweepPos >= f.slab.Len() {
			f.sweepPos = 0
		}
		i := uint32(f.sweepPos)
		f.sweepPos++
		if s := f.slab.At(i); s.key != "" && s.epoch != f.epochOf(policyOf(s.key)) {
			delete(f.index, s.key)
			s = f.slab.Mut(i)
			s.key, s.more = "", nil
		}
	}
}

// rebuildExpiry recreates the heap after a restore, in a deterministic
// order (by expiry, ties by key).
func (f *FSM) rebuildExpiry() {
	order := make([]uint32, 0, len(f.index))
	for i := range f.slab.Len() {
		if f.slab.At(uint32(i)).key != "" {
			order = append(order, uint32(i))
		}
	}
	slices.SortFunc(order, func(a, b uint32) int {
		sa, sb := f.slab.At(a), f.slab.At(b)
		if c := cmp.Compare(sa.exp, sb.exp); c != 0 {
			return c
		}
		return strings.Compare(sa.key, sb.key)
	})
	f.heap = make(expiryHeap, 0, len(order))
	for _, idx := range order {
		f.heap = append(f.heap, expiryItem{at: f.slab.At(idx).exp, idx: idx}) // sorted is a valid heap
	}
}
