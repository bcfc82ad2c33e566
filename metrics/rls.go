package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// RLSLimitStats is what one descriptor's decision adds to its limit's
// counters, counted per hit as envoyproxy/ratelimit counts them (a hit of
// cost n is n hits): total_hits, over_limit, near_limit (past the near
// ratio of the limit, up to it), within_limit, and shadow_mode (over the
// limit but let through by shadow_mode).
type RLSLimitStats struct {
	TotalHits, OverLimit, NearLimit, WithinLimit, ShadowMode uint64
}

// MaxRLSDescriptorSeries bounds the (domain, descriptor) label pairs of the
// per-descriptor counters: past it, new pairs count under descriptor
// "(other)". detailed_metric and value_to_metric put request values in
// the descriptor label, so traffic could otherwise grow it without bound.
const MaxRLSDescriptorSeries = 2000

// rlsLimits are envoyproxy/ratelimit's per-descriptor stats
// (ratelimit.service.rate_limit.DOMAIN.KEY.STAT in its statsd names,
// ratelimit_service_rate_limit_STAT{domain, key1, key2...} through its
// Prometheus mapping) as rlnode_rls_rate_limit_STAT_total{domain, descriptor}.
type rlsLimits struct {
	total, over, near, within, shadow *prometheus.CounterVec

	mu   sync.Mutex
	seen map[[2]string]bool
}

func newRLSLimits(reg *prometheus.Registry) *rlsLimits {
	vec := func(stat, help string) *prometheus.CounterVec {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rlnode_rls_rate_limit_" + stat + "_total",
			Help: help + " By domain and descriptor (key_value.key as configured; request values where detailed_metric or value_to_metric ask).",
		}, []string{"domain", "descriptor"})
		reg.MustRegister(v)
		return v
	}
	return &rlsLimits{
		total:  vec("total_hits", "Hits on Envoy rate limit descriptors that have a limit (envoyproxy/ratelimit's total_hits)."),
		over:   vec("over_limit", "Hits over the descriptor's limit (over_limit)."),
		near:   vec("near_limit", "Hits past 80% of the descriptor's limit, up to it (near_limit)."),
		within: vec("within_limit", "Hits within the descriptor's limit (within_limit)."),
		shadow: vec("shadow_mode", "Hits over the limit let through by shadow_mode (shadow_mode)."),
		seen:   map[[2]string]bool{},
	}
}

// labels bounds the label pairs.
func (r *rlsLimits) labels(domain, descriptor string) (string, string) {
	k := [2]string{domain, descriptor}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.seen[k] {
		if len(r.seen) >= MaxRLSDescriptorSeries {
			return domain, "(other)"
		}
		r.seen[k] = true
	}
	return domain, descriptor
}

// RLSLimit adds one descriptor's decision to its per-descriptor counters.
func (m *Metrics) RLSLimit(domain, descriptor string, st RLSLimitStats) {
	if m == nil {
		return
	}
	d, k := m.rlsLimits.labels(domain, descriptor)
	for _, c := range []struct {
		v *prometheus.CounterVec
		n uint64
	}{{m.rlsLimits.total, st.TotalHits}, {m.rlsLimits.over, st.OverLimit}, {m.rlsLimits.near, st.NearLimit},
		{m.rlsLimits.within, st.WithinLimit}, {m.rlsLimits.shadow, st.ShadowMode}} {
		// Every series of a pair appears at once, so a rate of 0 is a 0.
		c.v.WithLabelValues(d, k).Add(float64(c.n))
	}
}
