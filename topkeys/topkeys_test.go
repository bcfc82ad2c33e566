package topkeys

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// zipfStream is a skewed stream of n hits over keys and its true counts.
func zipfStream(seed uint64, n, keys int) ([]string, map[string]uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	z := rand.NewZipf(rng, 1.2, 1, uint64(keys-1))
	stream := make([]string, n)
	truth := map[string]uint64{}
	for i := range stream {
		stream[i] = fmt.Sprintf("client-%d", z.Uint64())
		truth[stream[i]]++
	}
	return stream, truth
}

// checkBounds asserts what the package promises of a list against the
// truth: every listed key's true count lies in [Min, Max] and Count is
// within bound of it; no unlisted key was hit more than Unlisted times.
func checkBounds(t *testing.T, l List, truth map[string]uint64, bound uint64) {
	t.Helper()
	listed := map[string]bool{}
	for _, k := range l.Keys {
		listed[k.Key] = true
		tr := truth[k.Key]
		if tr < k.Min || k.Count < tr || k.Count-tr > bound {
			t.Fatalf("%s: true %d, listed [%d, %d]; overestimate bound %d", k.Key, tr, k.Min, k.Count, bound)
		}
	}
	for key, tr := range truth {
		if !listed[key] && tr > l.Unlisted {
			t.Fatalf("%s was hit %d times, unlisted, but Unlisted is %d", key, tr, l.Unlisted)
		}
	}
}

func TestSpaceSavingBounds(t *testing.T) {
	const n, k = 50_000, 32
	stream, truth := zipfStream(7, n, 5_000)
	s := newSummary(k)
	for _, key := range stream {
		s.add(key)
	}
	l := s.list()
	if l.Total != n || len(l.Keys) != k || l.Exact() {
		t.Fatalf("total %d, %d keys, exact %v; want %d, %d, false", l.Total, len(l.Keys), l.Exact(), n, k)
	}
	checkBounds(t, l, truth, n/k)
	// Every key hit more than N/k times is in the summary.
	for key, tr := range truth {
		if _, ok := s.pos[key]; tr > n/k && !ok {
			t.Fatalf("%s hit %d > N/k = %d times but not counted", key, tr, n/k)
		}
	}
}

func TestSmallStreamsAreExact(t *testing.T) {
	s := newSummary(8)
	for _, key := range []string{"a", "b", "a", "c", "a", "b"} {
		s.add(key)
	}
	l := Merge(2, s.list())
	if whole := s.list(); !whole.Exact() {
		t.Fatalf("a summary that never evicted is not exact: %+v", whole)
	}
	if len(l.Keys) != 2 || l.Keys[0] != (Key{"a", 3, 3}) || l.Keys[1] != (Key{"b", 2, 2}) || l.Unlisted != 1 || l.Total != 6 {
		t.Fatalf("top 2 of a,b,a,c,a,b: %+v", l)
	}
}

// Merging summaries of disjoint streams (buckets, nodes) keeps the bounds,
// with the overestimate bound the sum of each part's N_i/k.
func TestMergeKeepsBounds(t *testing.T) {
	const k = 16
	var lists []List
	all := map[string]uint64{}
	var bound uint64
	for part := uint64(0); part < 6; part++ {
		stream, truth := zipfStream(part, 5_000+int(part)*1_000, 800)
		s := newSummary(k)
		for _, key := range stream {
			s.add(key)
		}
		for key, c := range truth {
			all[key] += c
		}
		bound += uint64(len(stream)) / k
		lists = append(lists, s.list())
	}
	m := Merge(10, lists...)
	if len(m.Keys) != 10 {
		t.Fatalf("%d keys, want 10", len(m.Keys))
	}
	checkBounds(t, m, all, bound)
}

func TestRecorderWindowSlides(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	r := newRecorder(Config{K: 4, Bucket: time.Hour, Buckets: 3}, clock)
	t.Cleanup(r.Close)
	for i := 0; i < 5; i++ {
		r.Record("login", "mallory", Refused)
	}
	r.Record("login", "alice", Allowed)
	r.Record("api", "bob", Allowed)
	deadline := time.Now().Add(10 * time.Second)
	for r.Top("", 0).Policies == nil || total(r.Top("", 0)) < 7 {
		if time.Now().After(deadline) {
			t.Fatalf("hits not drained: %+v", r.Top("", 0))
		}
		time.Sleep(time.Millisecond)
	}
	rep := r.Top("login", 1)
	if len(rep.Policies) != 1 || rep.Policies[0].Refused.Keys[0] != (Key{"mallory", 5, 5}) || rep.Policies[0].Allowed.Total != 1 {
		t.Fatalf("login top: %+v", rep)
	}
	// Two rotations later the hits are still in the 3-bucket window; a
	// third pushes them out.
	for i, wantTotal := range []uint64{7, 7, 0} {
		mu.Lock()
		now = now.Add(time.Hour)
		mu.Unlock()
		r.rotate()
		if got := total(r.Top("", 0)); got != wantTotal {
			t.Fatalf("after %d rotations: %d hits in the window, want %d", i+1, got, wantTotal)
		}
	}
}

func total(r Report) uint64 {
	var n uint64
	for _, p := range r.Policies {
		n += p.Allowed.Total + p.Refused.Total
	}
	return n
}

// BenchmarkRecord is the hit path's cost: go test ./topkeys -bench Record
// -benchmem (0 allocs/op expected).
func BenchmarkRecord(b *testing.B) {
	r := New(Config{})
	defer r.Close()
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("client-%d", i)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			o := Allowed
			if i&7 == 0 {
				o = Refused
			}
			r.Record("default", keys[i&1023], o)
			i++
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(r.dropped.Load())/float64(b.N), "dropped/op")
}

// BenchmarkSummaryAdd is the owner goroutine's cost per hit.
func BenchmarkSummaryAdd(b *testing.B) {
	stream, _ := zipfStream(1, 1<<16, 100_000)
	s := newSummary(128)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.add(stream[i&(1<<16-1)])
	}
}

// Would-refuse hits (shadow policies) have their own lists, apart from
// allowed and refused, and survive merging nodes' reports.
func TestRecorderWouldRefuse(t *testing.T) {
	r := newRecorder(Config{K: 4, Bucket: time.Hour}, func() time.Time { return time.Unix(1_000, 0) })
	t.Cleanup(r.Close)
	r.Record("sh", "eve", WouldRefuse)
	r.Record("sh", "eve", WouldRefuse)
	r.Record("sh", "bob", Allowed)
	deadline := time.Now().Add(10 * time.Second)
	for {
		rep := r.Top("sh", 0)
		if len(rep.Policies) == 1 && rep.Policies[0].WouldRefuse.Total+rep.Policies[0].Allowed.Total == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hits not drained: %+v", rep)
		}
		time.Sleep(time.Millisecond)
	}
	m := MergeReports(10, r.Top("sh", 0), r.Top("sh", 0))
	if p := m.Policies[0]; p.WouldRefuse.Total != 4 || p.WouldRefuse.Keys[0].Key != "eve" || p.Refused.Total != 0 || p.Allowed.Total != 2 {
		t.Fatalf("merged: %+v", p)
	}
}
