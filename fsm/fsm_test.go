package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/policy"
	"github.com/rlnode/rlnode/window"
)

const t0 = int64(1_700_000_000_000)

// memSink is a raft.SnapshotSink over a buffer, for round trips without a
// snapshot store.
type memSink struct {
	bytes.Buffer
	cancelled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }
func (s *memSink) Close() error  { return nil }

// persistSnapshot takes a snapshot of f and persists it into memory.
func persistSnapshot(t *testing.T, f *FSM) *memSink {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	return sink
}

type testFSM struct {
	t     *testing.T
	f     *FSM
	index uint64
	fatal []error
}

func newTestFSM(t *testing.T) *testFSM {
	tf := &testFSM{t: t}
	tf.f = New(Config{OnFatal: func(err error) { tf.fatal = append(tf.fatal, err) }})
	return tf
}

func (tf *testFSM) apply(term uint64, data []byte) any {
	tf.index++
	return tf.f.Apply(&raft.Log{Index: tf.index, Term: term, Type: raft.LogCommand, Data: data})
}

func (tf *testFSM) hits(term uint64, now int64, hits ...HitV1) *HitsResult {
	tf.t.Helper()
	res, ok := tf.apply(term, AppendHitsV1(nil, now, hits)).(*HitsResult)
	if !ok {
		tf.t.Fatalf("apply of hits at %d did not return *HitsResult", now)
	}
	return res
}

func hit(client string) HitV1 {
	return HitV1{Policy: "default", Client: client, Limit: 3, WindowMs: 1_000, Cost: 1}
}

func TestApplyDecidesEachHitInOrder(t *testing.T) {
	tf := newTestFSM(t)
	res := tf.hits(1, t0, hit("a"), hit("a"), hit("b"), hit("a"), hit("a"))
	want := []struct {
		outcome   window.Outcome
		remaining int64
	}{{window.Allowed, 2}, {window.Allowed, 1}, {window.Allowed, 2}, {window.Allowed, 0}, {window.Refused, 0}}
	for i, w := range want {
		d := res.dec(i)
		if d.Outcome != w.outcome || d.Remaining != w.remaining || d.ResetAt != t0+1_000 {
			t.Fatalf("hit %d: %+v, want %v remaining %d resetAt %d", i, d, w.outcome, w.remaining, t0+1_000)
		}
	}
	w, ok := tf.f.window("default", "a")
	if !ok || w.Start != t0 || w.Count != 3 {
		t.Fatalf("stored window of a = %+v %v, want start %d count 3 (refused hit not counted)", w, ok, t0)
	}
	// Different policies are independent budgets.
	other := hit("a")
	other.Policy = "login"
	if d := tf.hits(1, t0+1, other).dec(0); d.Outcome != window.Allowed || d.Remaining != 2 {
		t.Fatalf("other policy shares the budget: %+v", d)
	}
	// The window reopens exactly windowMs later.
	if d := tf.hits(1, t0+1_000, hit("a")).dec(0); d.Outcome != window.Allowed || d.WindowStart != t0+1_000 || d.Remaining != 2 {
		t.Fatalf("hit at the boundary: %+v, want a fresh window", d)
	}
}

func TestClockNeverRunsBackwards(t *testing.T) {
	tf := newTestFSM(t)
	tf.hits(1, t0, hit("a"), hit("a"), hit("a"))
	// Same term, a stamp from the past: clamped to the last applied time, so
	// the spent window is not reopened.
	if d := tf.hits(1, t0-5_000, hit("a")).dec(0); d.Outcome != window.Refused {
		t.Fatalf("a stamp behind the applied time reopened the window: %+v", d)
	}
	// New term whose leader is 10 s behind: time continues from the last
	// applied time and keeps moving with the new leader's clock.
	if res := tf.hits(2, t0-10_000, hit("a")); res.Now != t0 || res.dec(0).Outcome != window.Refused {
		t.Fatalf("first entry of a lagging term: now %d decision %+v, want now %d refused", res.Now, res.dec(0), t0)
	}
	res := tf.hits(2, t0-10_000+1_000, hit("a"))
	if res.Now != t0+1_000 || res.dec(0).Outcome != window.Allowed || res.dec(0).WindowStart != t0+1_000 {
		t.Fatalf("lagging leader 1 s later: now %d, %+v; want the window to roll at %d", res.Now, res.dec(0), t0+1_000)
	}
	// A leader ahead of applied time needs no offset.
	if res := tf.hits(3, t0+50_000, hit("b")); res.Now != t0+50_000 {
		t.Fatalf("leader ahead: now %d, want %d", res.Now, t0+50_000)
	}
}

func TestExpiryDeletesLapsedWindowsOnly(t *testing.T) {
	tf := newTestFSM(t)
	for i := 0; i < 1_000; i++ {
		tf.hits(1, t0+int64(i), hit(fmt.Sprintf("c%d", i)))
	}
	if n := tf.f.Stats().StoredWindows; n != 1_000 {
		t.Fatalf("stored %d windows, want 1000", n)
	}
	// At t0+1500 the windows opened before t0+500 have lapsed. Applies
	// expire a bounded amount each, so keep applying until it settles.
	for i := 0; i < 10; i++ {
		tf.hits(1, t0+1_500, hit("z"))
	}
	// c0..c500 lapse by t0+1500 (start+window <= now); c501..c999 and z live.
	if n := tf.f.Stats().StoredWindows; n != 499+1 {
		t.Fatalf("stored %d windows after expiry, want 500 (499 live + z)", n)
	}
	if _, ok := tf.f.window("default", "c500"); ok {
		t.Fatal("c500 lapsed exactly at t0+1500 but is still stored")
	}
	if w, ok := tf.f.window("default", "c501"); !ok || w.Count != 1 {
		t.Fatal("c501 is live until t0+1501 but was expired")
	}
}

func TestExpiryIgnoresStaleQueueItems(t *testing.T) {
	tf := newTestFSM(t)
	tf.hits(1, t0, hit("a"))
	tf.hits(1, t0+1_000, hit("a")) // reopens: the first queue item is stale
	tf.hits(1, t0+1_500, hit("b")) // pops the stale item at t0+1000 expiry
	if w, ok := tf.f.window("default", "a"); !ok || w.Start != t0+1_000 {
		t.Fatalf("a's live window was expired by a stale queue item: %+v %v", w, ok)
	}
}

func TestSnapshotRestoreKeepsDigest(t *testing.T) {
	tf := newTestFSM(t)
	tf.apply(1, EncodeSetNode(Node{ID: "n1", RaftAddr: "127.0.0.1:8301", HTTPAddr: "127.0.0.1:8081"}))
	for i := 0; i < 2_000; i++ {
		tf.hits(1, t0+int64(i), hit(fmt.Sprintf("k%d", i%300)), HitV1{Policy: "p2", Client: "x", Limit: 100, WindowMs: 60_000, Cost: 2})
	}
	d1, idx1 := tf.f.Digest()
	sink := persistSnapshot(t, tf.f)
	other := newTestFSM(t)
	other.hits(1, t0, hit("garbage-before-restore"))
	if err := other.f.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	d2, idx2 := other.f.Digest()
	if d1 != d2 || idx1 != idx2 {
		t.Fatalf("digest %x@%d after restore, want %x@%d", d2, idx2, d1, idx1)
	}
	if n, ok := other.f.Node("n1"); !ok || n.HTTPAddr != "127.0.0.1:8081" {
		t.Fatalf("node metadata lost in restore: %+v", n)
	}
	// Both continue identically: same decisions, same clock, same digest.
	other.index = tf.index
	for i := 0; i < 500; i++ {
		a := tf.hits(1, t0+1_990+int64(i), hit(fmt.Sprintf("k%d", i%400)))
		b := other.hits(1, t0+1_990+int64(i), hit(fmt.Sprintf("k%d", i%400)))
		if a.dec(0) != b.dec(0) || a.Now != b.Now {
			t.Fatalf("replicas diverged after restore at hit %d: %+v vs %+v", i, a.dec(0), b.dec(0))
		}
	}
	if a, _ := tf.f.Digest(); a != func() uint64 { d, _ := other.f.Digest(); return d }() {
		t.Fatal("digests differ after identical applies")
	}
}

func TestRestoreRejectsCorruptSnapshotAndKeepsState(t *testing.T) {
	tf := newTestFSM(t)
	for i := 0; i < 100; i++ {
		tf.hits(1, t0+int64(i), hit(fmt.Sprintf("k%d", i)))
	}
	snap, _ := tf.f.Snapshot()
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	good := sink.Bytes()
	before, _ := tf.f.Digest()
	corruptions := map[string][]byte{
		"empty":     {},
		"truncated": good[:len(good)/2],
		"bit flip":  flip(good, len(good)/2),
		"bad magic": flip(good, 0),
		"trailing":  append(append([]byte{}, good...), 0),
		"no crc":    good[:len(good)-4],
		"garbage":   []byte("this is not a snapshot at all, just text"),
	}
	for name, data := range corruptions {
		err := tf.f.Restore(io.NopCloser(bytes.NewReader(data)))
		if !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("%s: Restore error %v, want ErrBadSnapshot", name, err)
		}
		if after, _ := tf.f.Digest(); after != before {
			t.Errorf("%s: a failed restore changed the state", name)
		}
	}
}

func flip(b []byte, i int) []byte {
	c := append([]byte{}, b...)
	c[i] ^= 0x40
	return c
}

func TestUnknownOrCorruptEntryHalts(t *testing.T) {
	tf := newTestFSM(t)
	tf.hits(1, t0, hit("a"))
	before, _ := tf.f.Digest()
	if r := tf.apply(1, []byte{IgnoreUnknown | 9, 1, 2, 3}); r != nil {
		t.Fatalf("optional unknown entry returned %v, want nil (skipped)", r)
	}
	if len(tf.fatal) != 0 {
		t.Fatal("optional unknown entry halted the FSM")
	}
	r := tf.apply(1, []byte{42, 1})
	if err, ok := r.(error); !ok || !errors.Is(err, ErrCorrupt) || len(tf.fatal) != 1 {
		t.Fatalf("unknown entry type: result %v fatal %v, want ErrCorrupt and one OnFatal call", r, tf.fatal)
	}
	if r := tf.apply(1, AppendHitsV1(nil, t0, []HitV1{hit("a")})); !errors.Is(r.(error), ErrHalted) {
		t.Fatalf("apply after halt returned %v, want ErrHalted", r)
	}
	if after, _ := tf.f.Digest(); after != before {
		t.Fatal("state changed after the FSM halted")
	}
}

func TestCodecRoundTrip(t *testing.T) {
	in := []HitV1{hit("alice"), {Policy: "p", Client: "bob ü", Limit: 1 << 40, WindowMs: MaxWindowMs, Cost: 7}}
	now, out, err := DecodeHitsV1(AppendHitsV1(nil, t0, in))
	if err != nil || now != t0 || len(out) != 2 || out[0] != in[0] || out[1] != in[1] {
		t.Fatalf("round trip: now %d hits %+v err %v", now, out, err)
	}
	bad := []HitV1{
		{Policy: "default", Client: "", Limit: 1, WindowMs: 1, Cost: 1},
		{Policy: "default", Client: "a\x00b", Limit: 1, WindowMs: 1, Cost: 1},
		{Policy: "default", Client: string(bytes.Repeat([]byte("x"), MaxClientLen+1)), Limit: 1, WindowMs: 1, Cost: 1},
		{Policy: "default", Client: "\xff", Limit: 1, WindowMs: 1, Cost: 1},
		{Policy: "default", Client: "a", Limit: 0, WindowMs: 1, Cost: 1},
		{Policy: "default", Client: "a", Limit: 1, WindowMs: 0, Cost: 1},
	}
	for _, h := range bad {
		if h.Validate() == nil {
			t.Errorf("Validate accepted %+v", h)
		}
		if _, _, err := DecodeHitsV1(AppendHitsV1(nil, t0, []HitV1{h})); !errors.Is(err, ErrCorrupt) {
			t.Errorf("decoder accepted %+v: %v", h, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(AppendHitsV1(nil, t0, []HitV1{hit("a"), hit("b")}))
	f.Add(EncodeSetNode(Node{ID: "n1", RaftAddr: "a", HTTPAddr: "b"}))
	f.Add(EncodeRemoveNode("n1"))
	f.Add(AppendHits(nil, t0, []Hit{{Policy: "p", Client: "a", Cost: 1}, {Policy: "q", Client: "b", Cost: 2}}, []int{2}))
	f.Add(EncodeSetPolicies(SetUpsert, []policy.Policy{policy.Fixed("p", 3, time.Second)}))
	f.Add(EncodeDeletePolicy("p"))
	f.Add(EncodeResetKey("p", "a"))
	f.Add([]byte{1, 1, 0xff, 0xff, 0xff})
	f.Add(EncodePermit(PermitEntry{Now: t0, Op: PermitAcquire, ID: testID(1), Owner: "o", Policy: "p", Client: "a", TTLMs: 1000}))
	f.Add(EncodePermit(PermitEntry{Now: t0, Op: PermitReleaseOldest, Policy: "p", Client: "a"}))
	f.Add(EncodePermit(PermitEntry{Now: t0, Op: PermitAcquire, ID: testID(1), Policy: "p", Client: "a"})) // ttl 0: corrupt
	f.Add(EncodeReservation(ReservationEntry{Now: t0, Op: ReservationReserve, ID: testID(2), TTLMs: 1000, Items: []ReserveItem{{"p", "a", 3}}}))
	f.Add(EncodeReservation(ReservationEntry{Now: t0, Op: ReservationSettle, ID: testID(2), Units: 1}))
	f.Fuzz(func(t *testing.T, data []byte) {
		tf := newTestFSM(t)
		before, _ := tf.f.Digest()
		r := tf.apply(1, data)
		if err, ok := r.(error); ok {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			if after, _ := tf.f.Digest(); after != before {
				t.Fatal("a rejected entry changed the state")
			}
		}
		_ = tf.f.Restore(io.NopCloser(bytes.NewReader(data)))
	})
}

// A window that lapsed but was not expired yet (expiry is bounded per entry)
// must not decide differently from a replica restored from a snapshot that
// left it out, even when the next hit brings a longer window.
func TestLapsedWindowDecidesLikeRestoredReplica(t *testing.T) {
	a := newTestFSM(t)
	a.f = New(Config{ExpireBudget: 1})
	for i := 0; i < 10; i++ {
		a.hits(1, t0, hit(fmt.Sprintf("k%d", i)))
	}
	a.hits(1, t0+1_500, hit("z")) // expires at most 1+1 of the ten
	sink := persistSnapshot(t, a.f)
	b := newTestFSM(t)
	if err := b.f.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	b.index = a.index
	longer := hit("k9")
	longer.WindowMs = 5_000
	da := a.hits(1, t0+1_600, longer).dec(0)
	db := b.hits(1, t0+1_600, longer).dec(0)
	if da != db {
		t.Fatalf("replicas diverged: %+v vs restored %+v", da, db)
	}
	if x, y := digestOf(a.f), digestOf(b.f); x != y {
		t.Fatalf("digests differ: %x vs %x", x, y)
	}
}

func digestOf(f *FSM) uint64 {
	d, _ := f.Digest()
	return d
}

// dec is hit i's single limit as the fixed-window Decision the version-1
// tests were written against.
func (r *HitsResult) dec(i int) window.Decision {
	p := r.Hits[i].Parts[0]
	return window.Decision{Outcome: p.Outcome, WindowStart: p.WindowStart, Remaining: p.Remaining, ResetAt: p.ResetAt}
}

// storedWindow is a key's first limit as stored (live or not).
type storedWindow struct{ Start, Count, WindowMs int64 }

func (f *FSM) window(policy, client string) (storedWindow, bool) {
	idx, ok := f.index[string(appendKey(nil, []byte(policy), []byte(client)))]
	if !ok {
		return storedWindow{}, false
	}
	s := f.slab.At(idx).first
	return storedWindow{Start: s.s.A, Count: s.s.B, WindowMs: s.windowMs}, true
}

// A sealed entry applies; the same entry with one payload byte changed
// halts the FSM instead of counting hits nobody sent; an entry without a
// checksum (written before checksums) applies as before.
func TestChecksummedEntries(t *testing.T) {
	tf := newTestFSM(t)
	data := AppendHitsV1(nil, t0, []HitV1{hit("alice")})
	apply := func(l raft.Log) any {
		tf.index++
		l.Index, l.Term = tf.index, 1
		return tf.f.Apply(&l)
	}
	if _, ok := apply(Sealed(data)).(*HitsResult); !ok {
		t.Fatal("a sealed entry did not apply")
	}
	if _, ok := apply(raft.Log{Type: raft.LogCommand, Data: data}).(*HitsResult); !ok {
		t.Fatal("an entry without a checksum did not apply")
	}
	if w, _ := tf.f.window("default", "alice"); w.Count != 2 {
		t.Fatalf("alice's window counts %d, want 2", w.Count)
	}

	bad := Sealed(append([]byte(nil), data...))
	bad.Data[len(bad.Data)-4] ^= 0x20 // one flipped bit in the payload
	err, ok := apply(bad).(error)
	if !ok || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "entry 3 fails its checksum") {
		t.Fatalf("damaged payload: %v; want ErrCorrupt naming entry 3", err)
	}
	if len(tf.fatal) != 1 {
		t.Fatalf("OnFatal called %d times, want once", len(tf.fatal))
	}
	if err, _ := apply(raft.Log{Type: raft.LogCommand, Data: data}).(error); !errors.Is(err, ErrHalted) {
		t.Fatalf("after a damaged entry the FSM must stay halted, got %v", err)
	}
	if VerifyChecksum(&raft.Log{Type: raft.LogCommand, Data: data, Extensions: []byte{'r', 1, 0}}) == nil {
		t.Fatal("a truncated checksum passed")
	}
	if err := VerifyChecksum(&raft.Log{Type: raft.LogCommand, Data: data, Extensions: []byte("other middleware")}); err != nil {
		t.Fatalf("another kind of extension: %v", err)
	}
}

// Every node entry that validates decodes; one that does not is refused by
// CheckEntry before a leader could write it.
func TestNodeEntriesThatCannotDecodeAreRefused(t *testing.T) {
	good := Node{ID: "n1", RaftAddr: "10.0.0.1:8300", HTTPAddr: "10.0.0.1:8080"}
	if err := ValidateNode(good); err != nil {
		t.Fatal(err)
	}
	if err := CheckEntry(EncodeSetNode(good)); err != nil {
		t.Fatalf("a valid node's entry: %v", err)
	}
	for _, bad := range []Node{
		{ID: "evil\r", RaftAddr: "a:1"},
		{ID: "\xff", RaftAddr: "a:1"},
		{ID: strings.Repeat("n", MaxNodeIDLen+1), RaftAddr: "a:1"},
		{ID: "n1", RaftAddr: strings.Repeat("a", 513)},
		{ID: "n1", RaftAddr: "a:1", HTTPAddr: "b\n:2"},
	} {
		if ValidateNode(bad) == nil {
			t.Errorf("ValidateNode(%q) passed", bad)
		}
	}
	if CheckEntry(EncodeSetNode(Node{ID: "evil\r", RaftAddr: "a:1"})) == nil {
		t.Error("CheckEntry passed a node id with a control character")
	}
	if CheckEntry(EncodeRemoveNode("evil\r")) == nil {
		t.Error("CheckEntry passed a removal of an id the decoder refuses")
	}
}
