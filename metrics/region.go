package metrics

import "github.com/prometheus/client_golang/prometheus"

// RegionKey is one global key's slices in a region.
type RegionKey struct {
	Policy, Client                    string
	Held, Spent, Short, Returned, Got int64
}

// RegionView is a region's holder as metrics read it at scrape time.
type RegionView struct {
	Region                    string
	Leader, ParentUp          bool
	ParentRTTSeconds          float64
	ParentCalls, ParentFailed int64
	Keys                      []RegionKey
}

// RegionSource reports a region's holder (cmd/rlnode adapts region's).
type RegionSource interface{ RegionView() RegionView }

type regionCollector struct {
	src                               RegionSource
	held, spent, short, returned, got *prometheus.Desc
	rtt, up, leader, calls, failed    *prometheus.Desc
}

func (r regionCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{r.held, r.spent, r.short, r.returned, r.got, r.rtt, r.up, r.leader, r.calls, r.failed} {
		ch <- d
	}
}

func (r regionCollector) Collect(ch chan<- prometheus.Metric) {
	v := r.src.RegionView()
	ch <- prometheus.MustNewConstMetric(r.leader, prometheus.GaugeValue, b2f(v.Leader), v.Region)
	ch <- prometheus.MustNewConstMetric(r.up, prometheus.GaugeValue, b2f(v.ParentUp), v.Region)
	ch <- prometheus.MustNewConstMetric(r.rtt, prometheus.GaugeValue, v.ParentRTTSeconds, v.Region)
	ch <- prometheus.MustNewConstMetric(r.calls, prometheus.CounterValue, float64(v.ParentCalls), v.Region)
	ch <- prometheus.MustNewConstMetric(r.failed, prometheus.CounterValue, float64(v.ParentFailed), v.Region)
	for _, k := range v.Keys {
		ch <- prometheus.MustNewConstMetric(r.held, prometheus.GaugeValue, float64(k.Held), v.Region, k.Policy, k.Client)
		ch <- prometheus.MustNewConstMetric(r.spent, prometheus.CounterValue, float64(k.Spent), v.Region, k.Policy, k.Client)
		ch <- prometheus.MustNewConstMetric(r.short, prometheus.CounterValue, float64(k.Short), v.Region, k.Policy, k.Client)
		ch <- prometheus.MustNewConstMetric(r.returned, prometheus.CounterValue, float64(k.Returned), v.Region, k.Policy, k.Client)
		ch <- prometheus.MustNewConstMetric(r.got, prometheus.CounterValue, float64(k.Got), v.Region, k.Policy, k.Client)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// WatchRegion exports a region's slices per key (the 100 keys with the
// most units spent, on the region's leader) and its parent's round
// trip: rlnode_region_slice_units_{held,spent,returned,got}, the units
// of hits that found no slice (rlnode_region_slice_short_units), and
// rlnode_region_parent_{rtt_seconds,up,calls_total,failures_total},
// rlnode_region_leader.
func (m *Metrics) WatchRegion(src RegionSource) {
	key := []string{"region", "policy", "client"}
	one := []string{"region"}
	m.reg.MustRegister(regionCollector{src: src,
		held:     prometheus.NewDesc("rlnode_region_slice_units_held", "Units the region's live slices of a global key hold (on the region's leader).", key, nil),
		spent:    prometheus.NewDesc("rlnode_region_slice_units_spent", "Units of a global key's slices spent by hits in the region or lent as sub-leases (node leases, client.Local, RLQS; running total on the leader's state machine).", key, nil),
		short:    prometheus.NewDesc("rlnode_region_slice_short_units", "Units of hits on a global key, or of sub-lease requests, that found no slice: refused 429 while the parent said the window is spent, else waited for a slice or failed 503 parent_unreachable.", key, nil),
		returned: prometheus.NewDesc("rlnode_region_slice_units_returned", "Units of a global key's slices withdrawn in the region's log to go back to the parent.", key, nil),
		got:      prometheus.NewDesc("rlnode_region_slice_units_got", "Units of a global key the parent lent the region as slices.", key, nil),
		rtt:      prometheus.NewDesc("rlnode_region_parent_rtt_seconds", "Round trip of the region's last successful slice request to its parent.", one, nil),
		up:       prometheus.NewDesc("rlnode_region_parent_up", "1 when a slice request to the parent succeeded within the last 3 s.", one, nil),
		leader:   prometheus.NewDesc("rlnode_region_leader", "1 on the region's leader, the region's one holder at the parent.", one, nil),
		calls:    prometheus.NewDesc("rlnode_region_parent_calls_total", "Slice requests the region's leader sent to its parent.", one, nil),
		failed:   prometheus.NewDesc("rlnode_region_parent_failures_total", "Slice requests to the parent that failed (no answer, or an error).", one, nil),
	})
}
