package fsm_test

// Benchmarks of the state machine's hot path (encode, decode, apply) and of
// its whole-state operations (snapshot, restore, memory per window).
//
//	go test -run '^$' -bench . -count 5 ./fsm/            # everything
//	go test -run '^$' -bench . -short -count 5 ./fsm/     # without the 1M-window ones
//
// Targets: <= 200 bytes of heap per live window with 16-byte client ids;
// snapshot and restore of 1M windows <= 2 s each. Benchmarks only report;
// nothing here asserts on time.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/policy"
)

const (
	benchT0     = int64(1_700_000_000_000) // a Unix ms stamp; its varint is 6 bytes until ~2039
	benchPolicy = "default"
	benchWindow = int64(60_000)
	benchLimit  = int64(1_000_000_000) // every hit is allowed: the path that writes state
	million     = 1_000_000
)

// clientID is the 16-byte id `rlnode bench` uses: "c" and 15 digits.
func clientID(k int) string { return fmt.Sprintf("c%015d", k) }

func benchHit(client string) fsm.Hit {
	return fsm.Hit{Policy: benchPolicy, Client: client, Cost: 1}
}

// benchPolicies has one policy per algorithm under which every benchmark hit
// is allowed (the path that writes state) and a key touched once stays
// relevant for about benchWindow (the token bucket refills one token per
// window into a deep bucket).
var benchPolicies = []policy.Policy{
	{Name: benchPolicy, Algorithm: "fixed_window", Limits: []policy.Limit{{Limit: benchLimit, Window: policy.Duration(benchWindow * int64(time.Millisecond))}}},
	{Name: benchPolicy, Algorithm: "sliding_window", Limits: []policy.Limit{{Limit: benchLimit, Window: policy.Duration(benchWindow * int64(time.Millisecond))}}},
	{Name: benchPolicy, Algorithm: "token_bucket", Limits: []policy.Limit{{Limit: 1, Window: policy.Duration(benchWindow * int64(time.Millisecond)), Burst: benchLimit}}},
}

// hitsFor returns n hits for the keys first, first+1, ... (mod keys).
func hitsFor(first, n, keys int) []fsm.Hit {
	hits := make([]fsm.Hit, n)
	for i := range hits {
		hits[i] = benchHit(clientID((first + i) % keys))
	}
	return hits
}

// applier feeds entries to an FSM the way raft does: increasing index, one
// term. The raft.Log is reused so the benchmark adds no allocation of its own.
type applier struct {
	f   *fsm.FSM
	log raft.Log
}

func newApplier(tb testing.TB, p policy.Policy) *applier {
	a := &applier{log: raft.Log{Term: 1, Type: raft.LogCommand}}
	a.f = fsm.New(fsm.Config{OnFatal: func(err error) { tb.Errorf("fsm halted: %v", err) }})
	a.log.Index++
	a.log.Data = fsm.EncodeSetPolicies(fsm.SetUpsert, []policy.Policy{p})
	a.f.Apply(&a.log)
	return a
}

// apply applies data as a leader writes it: sealed with its checksum.
func (a *applier) apply(data []byte) *fsm.HitsResult {
	l := fsm.Sealed(data)
	a.log.Index++
	l.Index, l.Term = a.log.Index, a.log.Term
	res, _ := a.f.Apply(&l).(*fsm.HitsResult)
	return res
}

// BenchmarkVerifyChecksum is what the checksum adds to applying an entry
// of 64 or 512 hits (compare BenchmarkApplyBatch).
func BenchmarkVerifyChecksum(b *testing.B) {
	for _, size := range []int{64, 512} {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			l := fsm.Sealed(existingEntries(size, existingKeysKeys)[0])
			b.SetBytes(int64(len(l.Data)))
			for b.Loop() {
				if err := fsm.VerifyChecksum(&l); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// fill stores n live windows (keys 0..n-1) in batches of 512, stamped
// evenly over the first 50s of a 60s window as if the clients had arrived
// over time: windows start at many different times, all still live.
func (a *applier) fill(tb testing.TB, n int) {
	var buf []byte
	stepMs := 50_000 / int64((n+511)/512)
	for first := 0; first < n; first += 512 {
		now := benchT0 + int64(first/512)*stepMs
		buf = fsm.AppendHits(buf[:0], now, hitsFor(first, min(512, n-first), n), nil)
		if res := a.apply(buf); res == nil {
			tb.Fatalf("fill: apply at %d did not return a *HitsResult", first)
		}
	}
	if got := a.f.Stats().StoredWindows; got != n {
		tb.Fatalf("fill: %d stored windows, want %d", got, n)
	}
}

// ---- codec ----

func BenchmarkAppendHits(b *testing.B) {
	hits := hitsFor(0, 64, 64)
	buf := fsm.AppendHits(nil, benchT0, hits, nil)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		buf = fsm.AppendHits(buf[:0], benchT0, hits, nil)
	}
}

// BenchmarkDecodeHits measures the exported decoder, which copies every
// string into a fresh []Hit (Apply uses an internal zero-copy variant; its
// cost is inside BenchmarkApplyBatch).
func BenchmarkDecodeHits(b *testing.B) {
	buf := fsm.AppendHits(nil, benchT0, hitsFor(0, 64, 64), nil)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		if _, hits, _, err := fsm.DecodeHits(buf); err != nil || len(hits) != 64 {
			b.Fatalf("decode: %d hits, %v", len(hits), err)
		}
	}
}

// ---- apply ----

// existingKeysKeys is the key space of the existing-keys case: the same
// 10,000 uniform keys the cluster benchmark uses.
const existingKeysKeys = 10_000

// existingEntries prebuilds entries of size hits that cycle over keys which
// the FSM already stores (after prefill), all in one open window.
func existingEntries(size, keys int) [][]byte {
	n := (keys + size - 1) / size
	entries := make([][]byte, n)
	for j := range entries {
		entries[j] = fsm.AppendHits(nil, benchT0, hitsFor(j*size, size, keys), nil)
	}
	return entries
}

// newKeyEntry is one entry template whose client ids and stamp are
// rewritten in place for every batch, so each batch hits keys the FSM has
// never stored without building (and allocating) ids in the timed loop.
// Ids are "c" + 12 digits of the batch number + 3 digits of the position;
// the stamp advances stepMs per batch, so windows from about
// benchWindow/stepMs batches ago lapse and Apply's expiry deletes as many
// as each batch inserts: the steady state of a stream of new clients.
type newKeyEntry struct {
	data    []byte
	idOff   []int // offset of each client id's 12 batch digits
	stepMs  int64
	nowSize int
}

func newNewKeyEntry(tb testing.TB, size int, stepMs int64) *newKeyEntry {
	if size > 1000 {
		tb.Fatalf("batch of %d: ids have 3 digits for the position", size)
	}
	hits := make([]fsm.Hit, size)
	for i := range hits {
		hits[i] = benchHit(fmt.Sprintf("c%012d%03d", 0, i))
	}
	e := &newKeyEntry{data: fsm.AppendHits(nil, benchT0, hits, nil), stepMs: stepMs}
	e.nowSize = binary.PutVarint(make([]byte, binary.MaxVarintLen64), benchT0)
	for i := range hits {
		off := bytes.Index(e.data, []byte(hits[i].Client))
		if off < 0 {
			tb.Fatal("client id not found in the encoded entry")
		}
		e.idOff = append(e.idOff, off+1)
	}
	return e
}

// batch rewrites the template for batch number n and returns it.
func (e *newKeyEntry) batch(tb testing.TB, n int) []byte {
	var stamp [binary.MaxVarintLen64]byte
	if binary.PutVarint(stamp[:], benchT0+int64(n)*e.stepMs) != e.nowSize {
		tb.Fatal("stamp outgrew its varint")
	}
	copy(e.data[2:], stamp[:e.nowSize])
	var digits [12]byte
	for i, v := 11, n; i >= 0; i-- {
		digits[i] = byte('0' + v%10)
		v /= 10
	}
	for _, off := range e.idOff {
		copy(e.data[off:off+12], digits[:])
	}
	return e.data
}

func reportPerHit(b *testing.B, size int) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(size), "ns/hit")
}

// BenchmarkApplyBatch applies one hits entry per op through the raft.FSM
// interface. existing-keys: every hit lands on a stored window (the common
// case for active clients); new-keys: every hit is a client without a stored
// window, so Apply inserts it, queues it for expiry, and deletes as many
// lapsed windows (steady state, about 100 batches of windows live).
func BenchmarkApplyBatch(b *testing.B) {
	for _, p := range benchPolicies {
		b.Run(p.Algorithm, func(b *testing.B) {
			for _, size := range []int{64, 512} {
				b.Run(strconv.Itoa(size), func(b *testing.B) { benchApply(b, p, size) })
			}
		})
	}
}

func benchApply(b *testing.B, p policy.Policy, size int) {
	b.Run("existing-keys", func(b *testing.B) {
		a := newApplier(b, p)
		entries := existingEntries(size, existingKeysKeys)
		for _, e := range entries { // prefill: every key stored
			a.apply(e)
		}
		if got := a.f.Stats().StoredWindows; got != existingKeysKeys {
			b.Fatalf("prefill stored %d windows, want %d", got, existingKeysKeys)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if a.apply(entries[i%len(entries)]) == nil {
				b.Fatal("apply did not return a *HitsResult")
			}
			i++
		}
		reportPerHit(b, size)
		if got := a.f.Stats().StoredWindows; got != existingKeysKeys {
			b.Fatalf("%d stored windows after the run, want %d", got, existingKeysKeys)
		}
	})
	b.Run("new-keys", func(b *testing.B) {
		a := newApplier(b, p)
		const stepMs = 600 // keys of a 60s window lapse after 100 to 300 batches
		e := newNewKeyEntry(b, size, stepMs)
		n := 0
		for ; n < 400; n++ { // reach the steady state before timing
			a.apply(e.batch(b, n))
		}
		b.ReportAllocs()
		for b.Loop() {
			if a.apply(e.batch(b, n)) == nil {
				b.Fatal("apply did not return a *HitsResult")
			}
			n++
		}
		reportPerHit(b, size)
		if got, max := a.f.Stats().StoredWindows, (3*int(benchWindow/stepMs)+2)*size; got > max {
			b.Fatalf("%d stored windows, want at most %d: expiry did not keep up", got, max)
		}
	})
}

// TestApplyAllocsExistingKeys pins the allocation profile of the hot path:
// a batch over stored windows allocates the result (struct and decision
// slice), not anything per hit.
func TestApplyAllocsExistingKeys(t *testing.T) {
	for _, p := range benchPolicies {
		t.Run(p.Algorithm, func(t *testing.T) { testApplyAllocs(t, p) })
	}
}

func testApplyAllocs(t *testing.T, p policy.Policy) {
	a := newApplier(t, p)
	entries := existingEntries(64, 1_000)
	for _, e := range entries {
		a.apply(e)
	}
	i := 0
	allocs := testing.AllocsPerRun(200, func() {
		if a.apply(entries[i%len(entries)]) == nil {
			t.Fatal("apply did not return a *HitsResult")
		}
		i++
	})
	t.Logf("%.1f allocations per 64-hit batch over existing keys", allocs)
	if allocs > 4 {
		t.Fatalf("%.1f allocations per 64-hit batch over existing keys, want <= 4 (per batch, not per hit)", allocs)
	}
}

// ---- whole state ----

// discardSink is a raft.SnapshotSink that counts and drops what it is given.
type discardSink struct{ n int64 }

func (s *discardSink) Write(p []byte) (int, error) { s.n += int64(len(p)); return len(p), nil }
func (s *discardSink) Close() error                { return nil }
func (s *discardSink) Cancel() error               { return nil }
func (s *discardSink) ID() string                  { return "discard" }

// bufSink is a raft.SnapshotSink into memory.
type bufSink struct{ bytes.Buffer }

func (s *bufSink) Close() error  { return nil }
func (s *bufSink) Cancel() error { return nil }
func (s *bufSink) ID() string    { return "buf" }

func skipIfShort(b *testing.B) {
	if testing.Short() {
		b.Skip("1M windows: slow, skipped under -short")
	}
}

func reportSeconds(b *testing.B) {
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/op")
}

// BenchmarkSnapshot1M takes and persists a snapshot of 1,000,000 live
// windows per op. lock-s is the part spent in Snapshot(), which holds the
// FSM's read lock and so delays Apply; persist-s runs without the lock.
func BenchmarkSnapshot1M(b *testing.B) {
	skipIfShort(b)
	a := newApplier(b, benchPolicies[0])
	a.fill(b, million)
	b.ReportAllocs()
	var lock, persist time.Duration
	var size int64
	for b.Loop() {
		t0 := time.Now()
		snap, err := a.f.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		sink := &discardSink{}
		if err := snap.Persist(sink); err != nil {
			b.Fatal(err)
		}
		snap.Release()
		lock += t1.Sub(t0)
		persist += time.Since(t1)
		size = sink.n
	}
	reportSeconds(b)
	b.ReportMetric(lock.Seconds()/float64(b.N), "lock-s")
	b.ReportMetric(persist.Seconds()/float64(b.N), "persist-s")
	b.ReportMetric(float64(size)/million, "snapB/window")
}

// BenchmarkRestore1M restores a snapshot of 1,000,000 windows from memory
// into a fresh FSM per op (decode, CRC check, map and expiry rebuild).
func BenchmarkRestore1M(b *testing.B) {
	skipIfShort(b)
	var snapBytes []byte
	var wantDigest uint64
	{
		a := newApplier(b, benchPolicies[0])
		a.fill(b, million)
		wantDigest, _ = a.f.Digest()
		snap, err := a.f.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		sink := &bufSink{}
		if err := snap.Persist(sink); err != nil {
			b.Fatal(err)
		}
		snapBytes = sink.Bytes()
	}
	runtime.GC() // the source FSM is garbage; don't bill its collection to Restore
	b.SetBytes(int64(len(snapBytes)))
	b.ReportAllocs()
	var f *fsm.FSM
	for b.Loop() {
		f = fsm.New(fsm.Config{})
		if err := f.Restore(io.NopCloser(bytes.NewReader(snapBytes))); err != nil {
			b.Fatal(err)
		}
	}
	reportSeconds(b)
	b.StopTimer()
	if got := f.Stats().StoredWindows; got != million {
		b.Fatalf("restored %d windows, want %d", got, million)
	}
	if d, _ := f.Digest(); d != wantDigest {
		b.Fatalf("digest %x after restore, want %x", d, wantDigest)
	}
}

// BenchmarkMemoryPerKey fills a fresh FSM with 1,000,000 live keys of
// 16-byte client ids per op, for each algorithm, and reports the live heap
// it adds per key (map, slab, key strings and expiry heap, after a full GC).
func BenchmarkMemoryPerKey(b *testing.B) {
	skipIfShort(b)
	twoLimits := benchPolicies[0]
	twoLimits.Algorithm = "fixed_window+day"
	for _, p := range append(benchPolicies, twoLimits) {
		if p.Algorithm == "fixed_window+day" {
			// A second limit moves limits 2..8 into their own array.
			p.Algorithm = "fixed_window"
			p.Limits = append(p.Limits, policy.Limit{Limit: benchLimit, Window: policy.Duration(24 * time.Hour)})
		}
		name := p.Algorithm
		if len(p.Limits) > 1 {
			name += "_two_limits"
		}
		b.Run(name, func(b *testing.B) {
			var perKey float64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				a := newApplier(b, p)
				a.fill(b, million)
				runtime.GC()
				runtime.ReadMemStats(&after)
				perKey = (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / million
				runtime.KeepAlive(a)
			}
			b.ReportMetric(perKey, "B/key")
		})
	}
}
