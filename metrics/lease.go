package metrics

import "github.com/prometheus/client_golang/prometheus"

// leaseMetrics count leased policies' events per policy (policies are an
// admin-defined, bounded set; clients are never labels).
type leaseMetrics struct {
	local    *prometheus.CounterVec
	logged   *prometheus.CounterVec
	granted  *prometheus.CounterVec
	returned *prometheus.CounterVec
	expired  *prometheus.CounterVec
}

func newLeaseMetrics(reg *prometheus.Registry) leaseMetrics {
	vec := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"policy"})
	}
	l := leaseMetrics{
		local:    vec("rlnode_lease_local_decisions_total", "Hits of leased policies this node decided from a lease it holds, allowed or refused, with no log entry."),
		logged:   vec("rlnode_lease_log_decisions_total", "Hits of leased policies this node sent through the log (its own entries as leader, forwarded as follower): no lease here could decide them."),
		granted:  vec("rlnode_lease_granted_units_total", "Units this node lent through grant entries as leader."),
		returned: vec("rlnode_lease_returned_units_total", "Unspent units given back to the budget through return entries this node wrote as leader."),
		expired:  vec("rlnode_lease_expired_units_total", "Units this node held and let expire unspent (lost to everyone until the grant's expiry)."),
	}
	reg.MustRegister(l.local, l.logged, l.granted, l.returned, l.expired)
	return l
}

// DecidedLocally implements cluster.LeaseObserver.
func (m *Metrics) DecidedLocally(policy string, hits int) {
	m.lease.local.WithLabelValues(policy).Add(float64(hits))
}

// DecidedThroughLog implements cluster.LeaseObserver.
func (m *Metrics) DecidedThroughLog(policy string, hits int) {
	m.lease.logged.WithLabelValues(policy).Add(float64(hits))
}

// LeaseGranted implements cluster.LeaseObserver.
func (m *Metrics) LeaseGranted(policy string, units int64) {
	m.lease.granted.WithLabelValues(policy).Add(float64(units))
}

// LeaseReturned implements cluster.LeaseObserver.
func (m *Metrics) LeaseReturned(policy string, units int64) {
	m.lease.returned.WithLabelValues(policy).Add(float64(units))
}

// LeaseExpired implements cluster.LeaseObserver.
func (m *Metrics) LeaseExpired(policy string, units int64) {
	m.lease.expired.WithLabelValues(policy).Add(float64(units))
}
