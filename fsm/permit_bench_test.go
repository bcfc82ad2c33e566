package fsm

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/policy"
)

// BenchmarkPermitAcquireRelease applies an acquire and a release entry of
// one of 1,000 keys with 10 permits live each: the state machine's cost of
// one permit's life (the log and the network come on top).
func BenchmarkPermitAcquireRelease(b *testing.B) {
	f := New(Config{})
	idx := uint64(0)
	apply := func(data []byte) any {
		idx++
		return f.Apply(&raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: data})
	}
	apply(EncodeSetPolicies(SetUpsert, []policy.Policy{conc("jobs", 20)}))
	for k := range 1000 {
		for j := range 10 {
			apply(EncodePermit(PermitEntry{Now: t0, Op: PermitAcquire, ID: testID(k*10 + j + 1), Policy: "jobs", Client: fmt.Sprint("c", k), TTLMs: 3_600_000}))
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		id := testID(100_000 + i)
		client := fmt.Sprint("c", i%1000)
		now := t0 + int64(i/1000)
		if r := apply(EncodePermit(PermitEntry{Now: now, Op: PermitAcquire, ID: id, Policy: "jobs", Client: client, TTLMs: 60_000})).(*PermitResult); !r.Acquired {
			b.Fatalf("acquire %d: %+v", i, r)
		}
		if r := apply(EncodePermit(PermitEntry{Now: now, Op: PermitRelease, ID: id})).(*PermitResult); r.NotFound {
			b.Fatalf("release %d: %+v", i, r)
		}
	}
}

// BenchmarkReserveSettle applies a reserve of two keys and its settle.
func BenchmarkReserveSettle(b *testing.B) {
	f := New(Config{})
	idx := uint64(0)
	apply := func(data []byte) any {
		idx++
		return f.Apply(&raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: data})
	}
	apply(EncodeSetPolicies(SetUpsert, []policy.Policy{pol("min", "fixed_window", lim(1<<40, time.Minute)), pol("day", "sliding_window", lim(1<<40, 24*time.Hour))}))
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		id := testID(i + 1)
		client := fmt.Sprint("team", i%1000)
		now := t0 + int64(i/1000)
		r := apply(EncodeReservation(ReservationEntry{Now: now, Op: ReservationReserve, ID: id, TTLMs: 60_000,
			Items: []ReserveItem{{"min", client, 4000}, {"day", client, 4000}}})).(*ReservationResult)
		if !r.Reserved {
			b.Fatalf("reserve %d: %+v", i, r)
		}
		if s := apply(EncodeReservation(ReservationEntry{Now: now, Op: ReservationSettle, ID: id, Units: 2650})).(*ReservationResult); s.NotFound {
			b.Fatalf("settle %d: %+v", i, s)
		}
	}
}
