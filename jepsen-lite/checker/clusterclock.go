package checker

import (
	"sort"
)

// clusterClock bounds the cluster's time (the state machine's applied
// time, Unix ms) at an instant of the run from below, from what answers
// reported: a peek's appliedNow, and any fixed or sliding window hit's
// window start (a window starts at or before the entry that decided it),
// were the cluster's
// time or earlier when the answer returned. Time never runs back, so at
// any later instant the cluster's time was at least that much. It lets a
// check judge "spent after its window ended" in cluster time, with no
// slack for the runner's clock against the cluster's (issue 34: a failover
// to a leader whose clock was ahead moved every window's end earlier in
// real time, and holders spent their last units after it).
type clusterClock struct {
	at  []int64 // return instants (ns since the run's start), ascending
	max []int64 // the largest witness returned by at[i]
}

func newClusterClock(pols map[string]Policy, history []Op) *clusterClock {
	type witness struct{ at, ms int64 }
	var ws []witness
	for _, op := range history {
		if op.Outcome != OutcomeOK {
			continue
		}
		switch {
		case op.Kind == KindPeek && op.AppliedNow > 0:
			ws = append(ws, witness{op.Return, op.AppliedNow})
		case op.Kind == KindHit && len(op.Limits) > 0 && op.Limits[0].WindowStart > 0 &&
			pols[policyName(op.Policy)].Algorithm != TokenBucket:
			ws = append(ws, witness{op.Return, op.Limits[0].WindowStart})
		}
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].at < ws[j].at })
	c := &clusterClock{}
	best := int64(0)
	for _, w := range ws {
		best = max(best, w.ms)
		c.at = append(c.at, w.at)
		c.max = append(c.max, best)
	}
	return c
}

// atLeast is a lower bound of the cluster's time at instant t (ns since
// the run's start): 0 when nothing returned before t.
func (c *clusterClock) atLeast(t int64) int64 {
	if c == nil {
		return 0
	}
	i := sort.Search(len(c.at), func(i int) bool { return c.at[i] >= t })
	if i == 0 {
		return 0
	}
	return c.max[i-1]
}
