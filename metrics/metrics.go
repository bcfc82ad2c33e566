// Package metrics holds rlnode's Prometheus collectors, shared by every
// front end (the HTTP API, the gRPC rate limit service) and the cluster's
// observer hooks. Each front end declares the small interface it records
// through; this package implements them all.
package metrics

import (
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rlnode/rlnode/cluster"
)

// GaugeSource is the cheap, lock-light view of a node that scrapes read.
type GaugeSource interface {
	Gauges() cluster.Gauges
}

// Metrics holds rlnode's Prometheus collectors in a registry of its own (no
// global registry), and implements cluster.Observer. Client ids are never
// labels: cardinality would follow traffic.
type Metrics struct {
	reg       *prometheus.Registry
	checks    *prometheus.CounterVec
	duration  prometheus.Histogram
	batchHits prometheus.Histogram
	forwarded prometheus.Counter
	served    prometheus.Counter
	// rlsDescriptors counts the gRPC rate limit service's descriptors by
	// domain and result.
	rlsDescriptors *prometheus.CounterVec
	rlsLimits      *rlsLimits
	lease          leaseMetrics
	// External holders' grants (the lease API, RLQS) by policy.
	leases, leaseUnits, leaseReturned *prometheus.CounterVec
	grpcRefused                       *prometheus.CounterVec
}

// New registers rlnode's collectors on reg.
func New(reg *prometheus.Registry) *Metrics {
	m := &Metrics{
		reg: reg,
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rlnode_checks_total", Help: "Checks answered, by policy and result (allowed, refused, cost_exceeds_limit, not_counted, outcome_unknown; would_refuse: a shadow policy let through a hit enforcing would refuse).",
		}, []string{"policy", "result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "rlnode_check_duration_seconds", Help: "Time to answer a check, including forwarding and consensus.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		batchHits: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "rlnode_batch_hits", Help: "Hits per log entry written by this node as leader (group commit).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		}),
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rlnode_forwarded_total", Help: "Hits this node forwarded to the leader.",
		}),
		served: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rlnode_forward_requests_served_total", Help: "Forwarding requests (batches) this node served as leader.",
		}),
	}
	m.rlsDescriptors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rlnode_rls_descriptors_total", Help: "Descriptors decided by the Envoy rate limit service, by domain and result (ok, over_limit, shadow_over_limit, unlimited, no_match, global_shadow_mode).",
	}, []string{"domain", "result"})
	m.leases = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rlnode_external_grants_total", Help: "Lease requests from external holders (applications, Envoy) answered by this node, by policy and result (granted, exhausted, refused, failed).",
	}, []string{"policy", "result"})
	m.leaseUnits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rlnode_external_granted_units_total", Help: "Units granted to external holders through this node, by policy.",
	}, []string{"policy"})
	m.leaseReturned = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rlnode_external_returned_units_total", Help: "Unspent units external holders gave back through this node, by policy.",
	}, []string{"policy"})
	m.rlsLimits = newRLSLimits(reg)
	m.lease = newLeaseMetrics(reg)
	m.grpcRefused = newGRPCRefused(reg)
	reg.MustRegister(m.leases, m.leaseUnits, m.leaseReturned, m.rlsDescriptors, m.checks, m.duration, m.batchHits, m.forwarded, m.served,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// WatchNode exports the node's gauges, read at scrape time.
func (m *Metrics) WatchNode(src GaugeSource) {
	gauge := func(name, help string, f func(cluster.Gauges) float64) prometheus.GaugeFunc {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(src.Gauges()) })
	}
	m.reg.MustRegister(
		gauge("rlnode_live_windows", "Windows stored in the state machine.", func(g cluster.Gauges) float64 { return float64(g.Windows) }),
		gauge("rlnode_raft_is_leader", "1 if this node is the Raft leader.", func(g cluster.Gauges) float64 {
			if g.IsLeader {
				return 1
			}
			return 0
		}),
		gauge("rlnode_raft_term", "Current Raft term.", func(g cluster.Gauges) float64 { return float64(g.Term) }),
		gauge("rlnode_raft_applied_index", "Last log index applied to the state machine.", func(g cluster.Gauges) float64 { return float64(g.AppliedIndex) }),
		gauge("rlnode_raft_commit_index", "Last committed log index known to this node.", func(g cluster.Gauges) float64 { return float64(g.CommitIndex) }),
		gauge("rlnode_clock_offset_seconds", "This node's clock minus the median of its peers' clocks, measured once a second.", func(g cluster.Gauges) float64 { return float64(g.ClockSkewMs) / 1000 }),
		gauge("rlnode_cluster_log_format", "The cluster's effective log format as this node sees it: the lowest any member reports (a member not heard from counts as the oldest). Writes that need a newer one are refused with 409 cluster_upgrading.",
			func(g cluster.Gauges) float64 { return float64(g.ClusterFormat) }),
		gauge("rlnode_peer_refused", "1 while this node has refused a node certificate as a non-member within the last minute: a removed node still calling, or, on a node that knows no leader, possibly its own leader it cannot place (rlnode status says which; restart it with --join).", func(g cluster.Gauges) float64 {
			if g.RefusedPeer {
				return 1
			}
			return 0
		}),
		gauge("rlnode_clock_skewed", "1 while this node cannot confirm its clock with a majority of the voters (off by more than --max-clock-offset, or voters unread) and refuses to lead.", func(g cluster.Gauges) float64 {
			if g.ClockSkewed {
				return 1
			}
			return 0
		}),
	)
	// rlnode_member{state}: 1 for this node's membership state, 0 for
	// the others; state="removed" is a node an operator removed that
	// still runs (stop it, or rlnode join it back).
	for _, state := range []string{cluster.MemberActive, cluster.MemberJoining, cluster.MemberRemoved} {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rlnode_member",
			Help:        "1 for this node's membership state: member, joining (in no configuration it has seen yet) or removed (it answers not_member; stop it, or rlnode join it back).",
			ConstLabels: prometheus.Labels{"state": state}},
			func() float64 {
				if src.Gauges().Membership == state {
					return 1
				}
				return 0
			}))
	}
}

// DiskSource is the node's data dir and snapshot record, read at scrape
// time.
type DiskSource interface {
	Disk() cluster.DiskUse
	SnapshotFailures() uint64
}

// WatchDisk exports the data dir's sizes, its file system's free space and
// the snapshot failures, for the disk and snapshot alerts.
func (m *Metrics) WatchDisk(src DiskSource) {
	gauge := func(name, help string, f func(cluster.DiskUse) float64) prometheus.GaugeFunc {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(src.Disk()) })
	}
	m.reg.MustRegister(
		gauge("rlnode_raft_log_bytes", "Bytes of the Raft log store on disk (WAL segments are preallocated).", func(d cluster.DiskUse) float64 { return float64(d.LogBytes) }),
		gauge("rlnode_snapshot_bytes", "Bytes of the Raft snapshots kept on disk.", func(d cluster.DiskUse) float64 { return float64(d.SnapshotBytes) }),
		gauge("rlnode_data_dir_free_bytes", "Bytes available to rlnode on the data dir's file system.", func(d cluster.DiskUse) float64 { return float64(d.FSFree) }),
		gauge("rlnode_data_dir_size_bytes", "Size in bytes of the data dir's file system.", func(d cluster.DiskUse) float64 { return float64(d.FSSize) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "rlnode_snapshot_failures_total", Help: "Snapshots this node failed to take or write since it started."},
			func() float64 { return float64(src.SnapshotFailures()) }),
	)
}

// BuildInfo exports rlnode_build_info{version, format, oldest_format} 1:
// the release and the log formats this build writes and reads, so a
// dashboard shows which releases a cluster runs during an upgrade.
func (m *Metrics) BuildInfo(version string, format, oldest uint32) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "rlnode_build_info",
		Help:        "1, labelled with this node's release and the newest and oldest log formats it applies.",
		ConstLabels: prometheus.Labels{"version": version, "format": fmt.Sprint(format), "oldest_format": fmt.Sprint(oldest)}})
	g.Set(1)
	m.reg.MustRegister(g)
}

// Handler serves the registry.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// BatchApplied implements cluster.Observer.
func (m *Metrics) BatchApplied(hits int) { m.batchHits.Observe(float64(hits)) }

// Forwarded implements cluster.Observer.
func (m *Metrics) Forwarded(hits int) { m.forwarded.Add(float64(hits)) }

// ObserveCheck records one answered check and how long it took.
func (m *Metrics) ObserveCheck(policy, result string, start time.Time) {
	if m == nil {
		return
	}
	m.checks.WithLabelValues(policy, result).Inc()
	m.duration.Observe(time.Since(start).Seconds())
}

// ForwardServed implements cluster.Observer: one forwarded batch served as
// leader.
func (m *Metrics) ForwardServed() {
	if m != nil {
		m.served.Inc()
	}
}

// RLSDescriptor counts one descriptor the gRPC rate limit service decided.
func (m *Metrics) RLSDescriptor(domain, result string) {
	if m != nil {
		m.rlsDescriptors.WithLabelValues(domain, result).Inc()
	}
}

// ObserveLease counts one external lease request and the units it got.
func (m *Metrics) ObserveLease(policy, result string, units int64) {
	if m == nil {
		return
	}
	m.leases.WithLabelValues(policy, result).Inc()
	if units > 0 {
		m.leaseUnits.WithLabelValues(policy).Add(float64(units))
	}
}

// ObserveLeaseReturn counts units an external holder gave back.
func (m *Metrics) ObserveLeaseReturn(policy string, units int64) {
	if m != nil {
		m.leaseReturned.WithLabelValues(policy).Add(float64(units))
	}
}
