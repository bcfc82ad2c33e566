package fsm

// cowSlab is a growable array of T in fixed chunks that can be frozen in
// O(chunks): a frozen view shares the chunks, and the first write to a
// chunk after a freeze copies that chunk (copy on write). A snapshot of a
// million windows therefore costs the FSM a pointer copy under its lock,
// not a copy of every window, and the copying that remains is spread over
// the entries that follow, one small chunk per first touch.
type cowSlab[T any] struct {
	chunks []*chunk[T]
	n      int    // slots in use: [0, n)
	gen    uint64 // chunks of an older generation are shared with a frozen view
	// deep, if set, is called on every slot of a chunk just copied, to
	// copy what the slot points to and writes through.
	deep func(*T)
}

// chunkBits sizes a chunk: 64 slots of ~40 bytes is one 2.5 KiB copy on
// a first write after a snapshot, and a million slots are 15,625 chunk
// pointers to copy when freezing.
const (
	chunkBits = 6
	chunkLen  = 1 << chunkBits
)

type chunk[T any] struct {
	gen   uint64
	slots [chunkLen]T
}

// Len is the number of slots.
func (s *cowSlab[T]) Len() int { return s.n }

// At returns slot i for reading only.
func (s *cowSlab[T]) At(i uint32) *T { return &s.chunks[i>>chunkBits].slots[i&(chunkLen-1)] }

// Mut returns slot i for writing, copying its chunk first if a frozen view
// shares it.
func (s *cowSlab[T]) Mut(i uint32) *T {
	c := s.chunks[i>>chunkBits]
	if c.gen != s.gen {
		cp := *c
		cp.gen = s.gen
		if s.deep != nil {
			for i := range cp.slots {
				s.deep(&cp.slots[i])
			}
		}
		c = &cp
		s.chunks[i>>chunkBits] = c
	}
	return &c.slots[i&(chunkLen-1)]
}

// Append adds a zero slot and returns its index.
func (s *cowSlab[T]) Append() uint32 {
	if s.n == len(s.chunks)*chunkLen {
		s.chunks = append(s.chunks, &chunk[T]{gen: s.gen})
	}
	s.n++
	return uint32(s.n - 1)
}

// Freeze returns a view of the slab as it is now that later writes do not
// change.
func (s *cowSlab[T]) Freeze() frozenSlab[T] {
	v := frozenSlab[T]{chunks: append([]*chunk[T](nil), s.chunks...), n: s.n}
	s.gen++
	return v
}

// frozenSlab is an immutable view from Freeze; it may be read without the
// FSM's lock.
type frozenSlab[T any] struct {
	chunks []*chunk[T]
	n      int
}

// Each calls fn for every slot in index order.
func (v frozenSlab[T]) Each(fn func(*T)) {
	for i := 0; i < v.n; i++ {
		fn(&v.chunks[i>>chunkBits].slots[i&(chunkLen-1)])
	}
}
