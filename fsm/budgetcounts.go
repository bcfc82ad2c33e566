package fsm

import "container/heap"

// budgetCounts are counts of the stored permits and reservations kept on
// apply, so that no reader scans them under the lock (issue 35: /metrics
// sorted every permit): per policy incarnation (the live permits a
// status page or a scrape reports), per owner (the leader's bound per
// credential, cluster.Budgets), and the bytes reservations hold. They
// are derived state: rebuilt from the permits and reservations on
// restore, never written to a snapshot, so replicas of every release
// agree on what they count. A permit past its TTL counts until the
// sweep drops it (every lease-family entry sweeps up to ExpireBudget).
type budgetCounts struct {
	permitsByPolicy map[policyEpoch]int64
	permitsByOwner  map[string]int64
	reservedByOwner map[string]int64
	reservedBytes   int64
}

type policyEpoch struct {
	name  string
	epoch uint32
}

func newBudgetCounts() budgetCounts {
	return budgetCounts{permitsByPolicy: map[policyEpoch]int64{}, permitsByOwner: map[string]int64{}, reservedByOwner: map[string]int64{}}
}

// countPermit adds (n 1) or removes (n -1) a stored permit of key.
func (c *budgetCounts) countPermit(key string, pm permit, n int64) {
	pe := policyEpoch{policyOf(key), pm.epoch}
	if c.permitsByPolicy[pe] += n; c.permitsByPolicy[pe] <= 0 {
		delete(c.permitsByPolicy, pe)
	}
	if c.permitsByOwner[pm.owner] += n; c.permitsByOwner[pm.owner] <= 0 {
		delete(c.permitsByOwner, pm.owner)
	}
}

// countReservation adds (n 1) or removes (n -1) a stored reservation.
func (c *budgetCounts) countReservation(r *reservation, n int64) {
	b := n * reservedBytes(r.items)
	c.reservedBytes += b
	if c.reservedByOwner[r.owner] += b; c.reservedByOwner[r.owner] <= 0 {
		delete(c.reservedByOwner, r.owner)
	}
}

// ReservationBytes is what a reservation of items holds in memory and
// in a snapshot, as its owner's budget counts it: each key's bytes and a
// fixed part per item and per reservation, so names of 250 bytes weigh
// what they cost (issue 35: a bound by count let 64 long keys cost
// 25 KB). The leader reads it of a request before the log.
func ReservationBytes(items []ReserveItem) int64 {
	n := int64(reservationOverhead)
	for _, it := range items {
		n += int64(1+len(it.Policy)+len(it.Client)) + itemOverhead
	}
	return n
}

// reservedBytes is ReservationBytes of a stored reservation (its keys
// are appendKey's: one length byte, the policy, the client).
func reservedBytes(items []reserved) int64 {
	n := int64(reservationOverhead)
	for _, it := range items {
		n += int64(len(it.key)) + itemOverhead
	}
	return n
}

// The fixed parts of ReservationBytes: the id, owner, index, expiry and
// the map and heap slots of a reservation; units, epoch and window starts
// of an item.
const (
	reservationOverhead = 160
	itemOverhead        = 64
)

// PermitsOfOwner is how many permits owner holds in this node's state.
func (f *FSM) PermitsOfOwner(owner string) int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.counts.permitsByOwner[owner]
}

// ReservedBytesOfOwner is what owner's reservations hold
// (ReservationBytes), settled ones until their TTL.
func (f *FSM) ReservedBytesOfOwner(owner string) int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.counts.reservedByOwner[owner]
}

// ReservedBytes is what every reservation holds.
func (f *FSM) ReservedBytes() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.counts.reservedBytes
}

// BudgetsDue says whether a stored permit or reservation has reached its
// expiry by now and waits for the sweep: the counts above still hold it.
func (f *FSM) BudgetsDue(now int64) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.permitHeap) > 0 && f.permitHeap[0].at <= now ||
		len(f.reservationHeap) > 0 && f.reservationHeap[0].at <= now
}

// PermitsByPolicy counts the permits stored per concurrency policy, 0 for
// one with none: O(policies), never a scan of the permits.
func (f *FSM) PermitsByPolicy() map[string]int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make(map[string]int64)
	for name, p := range f.policies {
		if p.p.IsConcurrency() {
			out[name] = f.counts.permitsByPolicy[policyEpoch{name, p.epoch}]
		}
	}
	return out
}

// rebuildBudgetCounts recounts after a restore.
func (f *FSM) rebuildBudgetCounts() {
	f.counts = newBudgetCounts()
	for key, ps := range f.permits {
		for _, pm := range ps {
			f.counts.countPermit(key, pm, 1)
		}
	}
	for _, r := range f.reservations {
		f.counts.countReservation(r, 1)
	}
}

// permitDue is one stored permit's place in the expiry heap: exactly one
// per permit, moved on renew and removed with the permit, so a release
// or a renew leaves nothing behind (issue 35: 293 bytes per acquire and
// release stayed until the TTL).
type permitDue struct {
	at    int64
	key   string
	index uint64
	pos   int
}

type permitDues []*permitDue

func (h permitDues) Len() int { return len(h) }
func (h permitDues) Less(i, j int) bool {
	a, b := h[i], h[j]
	if a.at != b.at {
		return a.at < b.at
	}
	if a.key != b.key {
		return a.key < b.key
	}
	return a.index < b.index
}
func (h permitDues) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos, h[j].pos = i, j
}
func (h *permitDues) Push(x any) {
	d := x.(*permitDue)
	d.pos = len(*h)
	*h = append(*h, d)
}
func (h *permitDues) Pop() any {
	old := *h
	d := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	d.pos = -1
	return d
}

// unschedule takes a permit's item out of the heap (if still there).
func (f *FSM) unschedule(pm permit) {
	if pm.due != nil && pm.due.pos >= 0 {
		heap.Remove(&f.permitHeap, pm.due.pos)
	}
}
