package fsm

import "testing"

// A frozen view keeps what the slab held when it was frozen, whatever is
// written or appended afterwards; the live slab sees every write.
func TestCowSlabFreezeIsolatesWrites(t *testing.T) {
	var s cowSlab[int]
	for i := 0; i < 3*chunkLen+5; i++ {
		*s.Mut(s.Append()) = i
	}
	v := s.Freeze()
	for i := 0; i < s.Len(); i += 7 {
		*s.Mut(uint32(i)) = -1
	}
	for i := 0; i < 2*chunkLen; i++ {
		*s.Mut(s.Append()) = 1000 + i
	}
	w := s.Freeze()
	*s.Mut(0) = -2

	want := 0
	v.Each(func(x *int) {
		if *x != want {
			t.Fatalf("first view slot %d = %d, want %d", want, *x, want)
		}
		want++
	})
	if want != 3*chunkLen+5 {
		t.Fatalf("first view has %d slots, want %d", want, 3*chunkLen+5)
	}
	i := 0
	w.Each(func(x *int) {
		exp := i
		switch {
		case i >= 3*chunkLen+5:
			exp = 1000 + i - (3*chunkLen + 5)
		case i%7 == 0:
			exp = -1
		}
		if *x != exp {
			t.Fatalf("second view slot %d = %d, want %d", i, *x, exp)
		}
		i++
	})
	if *s.At(0) != -2 || *s.At(7) != -1 || *s.At(1) != 1 || s.Len() != 5*chunkLen+5 {
		t.Fatalf("live slab: %d %d %d len %d", *s.At(0), *s.At(7), *s.At(1), s.Len())
	}
}
