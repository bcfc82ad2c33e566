// Package topkeys finds the clients hit most often per policy and outcome
// over the last minute, in bounded memory, and merges what several nodes
// found.
//
// Each summary is Metwally et al.'s space-saving algorithm with k counters:
// a key already counted is incremented; a new key takes a free counter, or,
// when all k are taken, the smallest counter's place, inheriting its count
// (remembered as the key's error). So a counted key's count overestimates
// its true count by at most its error, which is at most the smallest counter,
// which is at most N/k for N hits; a key not counted was hit at most the
// smallest counter's times. Any key hit more than N/k times is counted.
package topkeys

import "slices"

// counter is one slot of a summary.
type counter struct {
	key   string
	count uint64
	// err is what count may overstate: the count the key inherited when
	// it took an evicted key's slot.
	err uint64
}

// summary is a space-saving summary of at most k keys. Not safe for
// concurrent use: the recorder's owner goroutine alone writes it.
type summary struct {
	k int
	// heap is a min-heap on count, so the slot to evict is heap[0].
	heap []counter
	// pos maps a key to its index in heap.
	pos   map[string]int
	total uint64
	// evicted is set once a key lost its slot: counts may overstate from
	// then on.
	evicted bool
}

func newSummary(k int) *summary {
	return &summary{k: k, heap: make([]counter, 0, k), pos: make(map[string]int, k)}
}

// add counts one hit of key.
func (s *summary) add(key string) {
	s.total++
	if i, ok := s.pos[key]; ok {
		s.heap[i].count++
		s.down(i)
		return
	}
	if len(s.heap) < s.k {
		s.heap = append(s.heap, counter{key: key, count: 1})
		s.pos[key] = len(s.heap) - 1
		s.up(len(s.heap) - 1)
		return
	}
	min := s.heap[0]
	delete(s.pos, min.key)
	s.heap[0] = counter{key: key, count: min.count + 1, err: min.count}
	s.pos[key] = 0
	s.evicted = true
	s.down(0)
}

// floor is the most a key the summary does not hold may have been hit.
func (s *summary) floor() uint64 {
	if !s.evicted || len(s.heap) == 0 {
		return 0
	}
	return s.heap[0].count
}

func (s *summary) less(i, j int) bool { return s.heap[i].count < s.heap[j].count }

func (s *summary) swap(i, j int) {
	s.heap[i], s.heap[j] = s.heap[j], s.heap[i]
	s.pos[s.heap[i].key] = i
	s.pos[s.heap[j].key] = j
}

func (s *summary) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			return
		}
		s.swap(i, p)
		i = p
	}
}

func (s *summary) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(s.heap) {
			return
		}
		m := l
		if r := l + 1; r < len(s.heap) && s.less(r, l) {
			m = r
		}
		if !s.less(m, i) {
			return
		}
		s.swap(i, m)
		i = m
	}
}

// Key is one client of a top list with what is known of its hits: the
// true count lies in [Min, Count].
type Key struct {
	Key string `json:"key"`
	// Count is the space-saving estimate, never below the true count and
	// above it by at most N/k (the sum of N_i/k over merged parts).
	Count uint64 `json:"count"`
	// Min is never above the true count.
	Min uint64 `json:"min"`
}

// List is a top list of one policy and outcome: the keys hit most, their
// bounds, the total hits, and Unlisted, the most any key not listed may
// have been hit.
type List struct {
	Total    uint64 `json:"total"`
	Unlisted uint64 `json:"unlisted"`
	Keys     []Key  `json:"keys"`
}

// Exact reports whether every listed count is exact and no other key was
// hit.
func (l List) Exact() bool {
	if l.Unlisted > 0 {
		return false
	}
	for _, k := range l.Keys {
		if k.Min != k.Count {
			return false
		}
	}
	return true
}

// Merge adds lists of disjoint hits (one per bucket or per node): a key's
// bounds add up where it is listed, and where a list lacks it its Count
// grows by that list's Unlisted (the most it can have been hit there), so
// Count stays an upper bound (Agarwal et al., mergeable summaries). The
// result keeps the n keys of highest Count (all when n <= 0); a key
// dropped raises Unlisted to its Count.
func Merge(n int, lists ...List) List {
	var out List
	type merged struct {
		Key
		// listedUnlisted sums Unlisted of the lists that hold the key.
		listedUnlisted uint64
	}
	byKey := map[string]*merged{}
	var order []string
	for _, l := range lists {
		out.Total += l.Total
		out.Unlisted += l.Unlisted
		for _, k := range l.Keys {
			m := byKey[k.Key]
			if m == nil {
				m = &merged{Key: Key{Key: k.Key}}
				byKey[k.Key] = m
				order = append(order, k.Key)
			}
			m.Count += k.Count
			m.Min += k.Min
			m.listedUnlisted += l.Unlisted
		}
	}
	out.Keys = make([]Key, 0, len(order))
	for _, key := range order {
		m := byKey[key]
		m.Count += out.Unlisted - m.listedUnlisted
		out.Keys = append(out.Keys, m.Key)
	}
	slices.SortFunc(out.Keys, func(a, b Key) int {
		switch {
		case a.Count != b.Count:
			if a.Count > b.Count {
				return -1
			}
			return 1
		case a.Key < b.Key:
			return -1
		case a.Key > b.Key:
			return 1
		}
		return 0
	})
	if n > 0 && len(out.Keys) > n {
		for _, k := range out.Keys[n:] {
			out.Unlisted = max(out.Unlisted, k.Count)
		}
		out.Keys = out.Keys[:n]
	}
	return out
}

// list exports the summary.
func (s *summary) list() List {
	l := List{Total: s.total, Unlisted: s.floor(), Keys: make([]Key, len(s.heap))}
	for i, c := range s.heap {
		l.Keys[i] = Key{Key: c.key, Count: c.count, Min: c.count - c.err}
	}
	return l
}
