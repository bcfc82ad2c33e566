package region

import (
	"cmp"
	"slices"
	"time"

	"github.com/rlnode/rlnode/fsm"
)

// KeyView is one global key's slices in the region.
type KeyView struct {
	Policy, Client string
	// Held is what live slices hold; Spent, Short (units of hits that
	// found no slice: refused 429 while the parent said the window is
	// spent, else waited for a slice or failed 503), Returned (withdrawn
	// to go back up) and Got (units recorded) are running totals on the
	// state machine (replicated: every node of the region applies them).
	Held, Spent, Short, Returned, Got int64
}

// View is what the holder reports for metrics and status.
type View struct {
	Region string
	Leader bool
	// ParentRTT is the last successful slice request's round trip;
	// ParentUp is whether one succeeded within the last 3 s. Both, and
	// the call counts, are the holder's: known on the region's leader
	// only (a follower reports what it saw while it last led, if ever).
	ParentRTT                 time.Duration
	ParentUp                  bool
	ParentCalls, ParentFailed int64
	UnitsReturned             int64
	// Keys lists the keys with the most units spent first, at most
	// MaxViewKeys; KeysTotal is how many keys have slice state.
	Keys      []KeyView
	KeysTotal int
	// StatsAt is when the state machine reading behind Keys was taken
	// (zero before the first).
	StatsAt time.Time
}

// MaxViewKeys bounds the keys a View lists (metrics label values).
const MaxViewKeys = 100

// followerStatsEvery bounds how often a follower reads the state
// machine's slice counters for a view: one scan of at most
// fsm.MaxSliceKeys keys a second, however often operators ask.
const followerStatsEvery = time.Second

// View reports the holder's state on the leader (for metrics: keys on
// the leader only, so one series per key across the region).
func (h *Holder) View() View {
	v, _ := h.view(false)
	return v
}

// StatusView is View for an operator asking any node of the region: on
// a follower its keys come from this node's own state machine (the
// counters are replicated), read at most once a second.
func (h *Holder) StatusView() View {
	v, _ := h.view(true)
	return v
}

func (h *Holder) view(anyNode bool) (View, bool) {
	h.mu.Lock()
	leader := h.leader
	h.mu.Unlock()
	o := &h.obs
	v := View{Region: h.cfg.Name, Leader: leader, ParentRTT: time.Duration(o.rttNs.Load()),
		ParentUp:    time.Since(time.Unix(0, o.lastOK.Load())) < 3*time.Second,
		ParentCalls: o.calls.Load(), ParentFailed: o.failures.Load(), UnitsReturned: o.returnedUnits.Load()}
	var stats []fsm.SliceStat
	var at time.Time
	switch {
	case leader:
		// The tick read them (every 20 ms): no read of the state
		// machine here.
		o.mu.Lock()
		stats, at = o.stats, o.statsAt
		o.mu.Unlock()
	case anyNode:
		stats, at = o.followerStats(h.slices)
	default:
		return v, false
	}
	v.KeysTotal, v.StatsAt = len(stats), at
	for _, s := range stats {
		v.Keys = append(v.Keys, KeyView{Policy: s.Policy, Client: s.Client, Held: s.Held, Spent: s.Spent,
			Short: s.Short, Returned: s.Withdrawn, Got: s.Got})
	}
	slices.SortFunc(v.Keys, func(a, b KeyView) int {
		return cmp.Or(cmp.Compare(b.Spent, a.Spent), cmp.Compare(a.Policy, b.Policy), cmp.Compare(a.Client, b.Client))
	})
	if len(v.Keys) > MaxViewKeys {
		v.Keys = v.Keys[:MaxViewKeys]
	}
	return v, true
}

// followerStats is the state machine's slice counters on a follower,
// read again when the last reading is older than followerStatsEvery.
func (o *observed) followerStats(src Slices) ([]fsm.SliceStat, time.Time) {
	o.fmu.Lock()
	defer o.fmu.Unlock()
	if o.fstats == nil || time.Since(o.fstatsAt) >= followerStatsEvery {
		o.fstats, o.fstatsAt = src.SliceStats(), time.Now()
		if o.fstats == nil {
			o.fstats = []fsm.SliceStat{}
		}
	}
	return o.fstats, o.fstatsAt
}
