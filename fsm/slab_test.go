package fsm

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

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

// A snapshot is what the FSM held when it was taken, however the FSM
// changes while it is persisted (copy on write): new keys, spent keys,
// all-or-nothing groups rolled back over keys with several limits, a reset
// key, expiry. Restored, it has the digest the FSM had when it was taken.
// Persist runs beside the applies, so -race checks that nothing the
// snapshot reads is written.
func TestSnapshotIsFrozenWhileTheFSMChanges(t *testing.T) {
	tf := newTestFSM(t)
	tf.set(pol("api", "fixed_window", lim(50, time.Second), lim(80, time.Hour)), pol("org", "fixed_window", lim(2, time.Minute)))
	var keys []Hit
	for i := 0; i < 5*chunkLen; i++ {
		keys = append(keys, h2("api", fmt.Sprintf("k%d", i), 1))
	}
	tf.check(t0, nil, keys...)
	tf.check(t0+1, nil, h2("org", "o", 2)) // spent: groups with it roll back
	want := digestOf(tf.f)
	snap, err := tf.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan *memSink)
	go func() {
		sink := &memSink{}
		if err := snap.Persist(sink); err != nil {
			t.Error(err)
		}
		done <- sink
	}()
	for round := int64(0); round < 20; round++ {
		now := t0 + 10 + round*100
		tf.check(now, nil, keys[:3*chunkLen]...)
		tf.check(now, []int{2, 2}, keys[7], h2("org", "o", 1), keys[chunkLen+3], h2("org", "o", 1))
		tf.check(now, nil, h2("api", fmt.Sprintf("new%d", round), 1))
		tf.apply(1, EncodeResetKey("api", fmt.Sprintf("k%d", round)))
	}
	tf.check(t0+5_000, nil, h2("api", "late", 1)) // the 1s windows lapse; expiry runs
	sink := <-done
	if digestOf(tf.f) == want {
		t.Fatal("the FSM did not change; the test proves nothing")
	}
	fresh := newTestFSM(t)
	if err := fresh.f.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if got := digestOf(fresh.f); got != want {
		t.Fatalf("restored digest %x, want %x (the FSM's when the snapshot was taken)", got, want)
	}
}

// BenchmarkApplyAfterSnapshot1M applies 32 entries of 512 hits on random
// existing keys right after a snapshot of 1,000,000 keys: the entries that
// pay the copy on write (first touch of each chunk since the snapshot).
// first-entry-s is the first entry's time, the worst of them.
func BenchmarkApplyAfterSnapshot1M(b *testing.B) {
	if testing.Short() {
		b.Skip("1M keys")
	}
	const keys = 1_000_000
	f := New(Config{})
	var idx uint64
	apply := func(data []byte) {
		idx++
		f.Apply(&raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: data})
	}
	hits := make([]HitV1, 512)
	for first := 0; first < keys; first += 512 {
		for i := range hits {
			hits[i] = HitV1{Policy: "default", Client: fmt.Sprintf("c%015d", (first+i)%keys), Limit: 1 << 40, WindowMs: 3_600_000, Cost: 1}
		}
		apply(AppendHitsV1(nil, t0, hits))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	entries := make([][]byte, 32)
	for e := range entries {
		for i := range hits {
			hits[i].Client = fmt.Sprintf("c%015d", rng.IntN(keys))
		}
		entries[e] = AppendHitsV1(nil, t0+1, hits)
	}
	var firstEntry, all time.Duration
	for b.Loop() {
		if _, err := f.Snapshot(); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		for e, data := range entries {
			apply(data)
			if e == 0 {
				firstEntry += time.Since(t0)
			}
		}
		all += time.Since(t0)
	}
	b.ReportMetric(firstEntry.Seconds()/float64(b.N), "first-entry-s")
	b.ReportMetric(all.Seconds()/float64(b.N)/32, "entry-s")
}
