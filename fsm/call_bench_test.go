package fsm

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/rlnode/rlnode/window"
)

// BenchmarkApplyCalls: one entry of 1,000 items (gubernator's batch size)
// over 1,000 live keys, half token and half leaky buckets.
func BenchmarkApplyCalls(b *testing.B) {
	tf := newTestFSM(&testing.T{})
	items := make([]CallItem, 1000)
	for i := range items {
		items[i] = tokenItem(fmt.Sprintf("key-%04d", i), 1, 1_000_000)
		if i%2 == 1 {
			items[i].Call = window.Call{Alg: window.LeakyBucket, Hits: 1, Limit: 1_000_000, Duration: 60_000}
		}
	}
	data := EncodeCalls(CallsEntry{Now: t0, MaxKeys: 1 << 20, MaxKeysPerOwner: 1 << 20, Items: items})
	tf.apply(1, data)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		tf.apply(1, data)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(items)), "ns/item")
}

// BenchmarkCallKeyMemory reports the heap one stored per-call key costs
// (16-byte keys, half token and half leaky buckets).
func BenchmarkCallKeyMemory(b *testing.B) {
	const keys = 100_000
	for range b.N {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		tf := newTestFSM(&testing.T{})
		items := make([]CallItem, 1000)
		for n := 0; n < keys; n += len(items) {
			for i := range items {
				items[i] = tokenItem(fmt.Sprintf("key-%011d", n+i), 1, 100)
				if i%2 == 1 {
					items[i].Call = window.Call{Alg: window.LeakyBucket, Hits: 1, Limit: 100, Duration: 60_000}
				}
			}
			tf.apply(1, EncodeCalls(CallsEntry{Now: t0, MaxKeys: 1 << 20, MaxKeysPerOwner: 1 << 20, Items: items}))
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/keys, "B/key")
		runtime.KeepAlive(tf)
	}
}
