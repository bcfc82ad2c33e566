package region

import (
	"cmp"
	"slices"
	"time"
)

// KeyView is one global key's slices in the region.
type KeyView struct {
	Policy, Client string
	// Held is what live slices hold; Spent, Short (units of hits that
	// found no slice: refused 429 while the parent said the window is
	// spent, else waited for a slice or failed 503), Returned (withdrawn
	// to go back up) and Got (units recorded) are running totals on the
	// leader's state machine.
	Held, Spent, Short, Returned, Got int64
}

// View is what the holder reports for metrics and status.
type View struct {
	Region string
	Leader bool
	// ParentRTT is the last successful slice request's round trip;
	// ParentUp is whether one succeeded within the last 3 s.
	ParentRTT                 time.Duration
	ParentUp                  bool
	ParentCalls, ParentFailed int64
	UnitsReturned             int64
	// Keys lists the keys with the most units spent first, at most
	// MaxViewKeys.
	Keys []KeyView
}

// MaxViewKeys bounds the keys a View lists (metrics label values).
const MaxViewKeys = 100

// View reports the holder's state.
func (h *Holder) View() View {
	h.mu.Lock()
	leader := h.leader
	h.mu.Unlock()
	o := &h.obs
	v := View{Region: h.cfg.Name, Leader: leader, ParentRTT: time.Duration(o.rttNs.Load()),
		ParentUp:    time.Since(time.Unix(0, o.lastOK.Load())) < 3*time.Second,
		ParentCalls: o.calls.Load(), ParentFailed: o.failures.Load(), UnitsReturned: o.returnedUnits.Load()}
	o.mu.Lock()
	stats := o.stats
	o.mu.Unlock()
	if !leader {
		return v
	}
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
	return v
}
