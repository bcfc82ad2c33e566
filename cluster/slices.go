package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/lease"
)

// A region's side of global budgets (region/DESIGN.md): hits of a
// mirrored global policy are decided by the state machine from slices
// (fsm/slice.go); this file writes the slices the region's holder got
// from the parent, and makes a hit that found none wait briefly for one.

// ErrParentUnreachable: the region holds no slice of a global key's
// budget and none came within Config.SliceWait (its parent is cut off,
// slow, or the key is new and the parent's answer is late). Nothing was
// counted; the hit fails as for any cluster fault (503, Retry-After).
var ErrParentUnreachable = errors.New("parent unreachable: no slice of the global budget")

// noSliceFlag is the forward wire's hit flag byte for NoSlice (1 is
// UnknownPolicy; a node of the previous release reads it as neither).
const noSliceFlag = 2

func hitFlag(h HitResult) byte {
	switch {
	case h.NoSlice:
		return noSliceFlag
	case h.UnknownPolicy:
		return 1
	}
	return 0
}

// SliceWrite is one slice item and, for a grant or a dry word, the
// deadline it runs to on this process's clocks (a time.Now reading
// plus a duration: it carries the monotonic and the wall reading).
type SliceWrite struct {
	Item     fsm.SliceItem
	Deadline time.Time
}

// sliceMargin is what a slice's usable time loses at this level: the
// leader's ms stamps truncate twice (2 ms), one more for the timer,
// and the clock rate error (lease.MarginPPM of what is left).
const sliceMargin = 3 * time.Millisecond

// Slices are the slices a region's node writes (region/DESIGN.md): its
// parent's grants, recorded in its own log on its leader, a type of its
// own over sliceLog, the node as the slices use it.
type Slices struct {
	log   sliceLog
	state interface{ SliceStats() []fsm.SliceStat }
}

// sliceLog is the node as the slices write: leadership, the version
// gate, the leader clock's stamp and one entry written.
type sliceLog interface {
	IsLeader() bool
	RequireFormat(need fsm.Format) error
	stampNow(grant bool) (int64, error)
	// write applies data and returns the state machine's answer, or the
	// apply's failure (not counted or outcome unknown).
	write(data []byte) (any, error)
}

// nodeSlices is the node as the slices use it.
type nodeSlices struct{ *Node }

func (n nodeSlices) write(data []byte) (any, error) {
	f := n.apply(data, n.cfg.ApplyTimeout)
	if err := f.Error(); err != nil {
		return nil, classifyApply(err)
	}
	res := f.Response()
	if err, ok := res.(error); ok {
		return nil, outcomeUnknown(err)
	}
	return res, nil
}

// WriteSlices records items in the region's log, on the leader only
// (the region's holder runs there). Each grant or dry item is usable
// from the entry's stamp for what is left of its deadline, read after
// the stamp on both clocks less the margin; an item with nothing left
// is not written (its result is -1: give its units back). Withdraw
// items report the units they took out of the slice, which may then go
// back up. It needs format R5 on every voter.
func (s *Slices) WriteSlices(items []SliceWrite) ([]int64, error) {
	if !s.log.IsLeader() {
		return nil, ErrNotLeader
	}
	if err := s.log.RequireFormat(fsm.SlicesFormat); err != nil {
		return nil, err
	}
	// The stamp is read first: what is left of each deadline is read
	// after it, so stamp + usable is never past the deadline.
	now, err := s.log.stampNow(false)
	if err != nil {
		return nil, notCounted(ErrNotLeader, err)
	}
	t := time.Now()
	out := make([]int64, len(items))
	var keep []fsm.SliceItem
	var at []int
	for i, w := range items {
		it := w.Item
		if it.Kind != fsm.SliceWithdraw {
			left := min(w.Deadline.Sub(t), w.Deadline.Round(0).Sub(t.Round(0)))
			left -= left/1_000_000*lease.MarginPPM + sliceMargin
			if left < time.Millisecond {
				out[i] = -1
				continue
			}
			it.UsableMs = min(left.Milliseconds(), lease.MaxLeaseMs)
		}
		keep, at = append(keep, it), append(at, i)
	}
	if len(keep) == 0 {
		return out, nil
	}
	res, err := s.log.write(fsm.EncodeSlices(now, keep))
	if err != nil {
		return nil, err
	}
	sr, ok := res.(*fsm.SlicesResult)
	if !ok {
		return nil, outcomeUnknown(fmt.Errorf("unexpected apply response %T", res))
	}
	for j, i := range at {
		out[i] = sr.Withdrawn[j]
	}
	return out, nil
}

// SliceStats is the region's slice state per key, as this node has
// applied it (fsm.FSM.SliceStats).
func (s *Slices) SliceStats() []fsm.SliceStat { return s.state.SliceStats() }

// awaitSlices handles a decided group with a hit that found no slice:
// it waits (up to SliceWait, or ctx) until this node has applied a
// slice or the parent's word for every such key, then decides the
// group again; if the slices did not come, the group fails not counted
// with ErrParentUnreachable. The region's holder notices the demand
// from the state machine's counters (the hit that found no slice
// counted as short there).
func (n *Node) awaitSlices(ctx context.Context, g group, o outcome) outcome {
	if o.err != nil || !anyNoSlice(o.res) {
		return o
	}
	// The wait is bounded by SliceWait; deciding again is not: a decision
	// cut off by the wait's deadline after its entry was sent would be an
	// unknown outcome where there is a plain answer to give.
	wait, cancel := context.WithTimeout(ctx, n.cfg.SliceWait)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		ready := true
		for _, h := range o.res.Hits {
			if h.NoSlice && !n.fsm.SliceReady(h.Policy, h.Client) {
				ready = false
			}
		}
		if ready {
			o = n.decide(ctx, g)
			if o.err != nil || !anyNoSlice(o.res) {
				return o
			}
		}
		select {
		case <-wait.Done():
			return outcome{res: o.res, err: notCounted(ErrParentUnreachable, nil)}
		case <-n.stop:
			return outcome{err: notCounted(nil, ErrClosed)}
		case <-tick.C:
		}
	}
}

func anyNoSlice(r CheckResult) bool {
	for _, h := range r.Hits {
		if h.NoSlice {
			return true
		}
	}
	return false
}
