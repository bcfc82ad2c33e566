package metrics

import "github.com/prometheus/client_golang/prometheus"

// PermitSource counts the live concurrency permits per policy, read at
// scrape time (cluster.Node).
type PermitSource interface {
	LivePermitsByPolicy() map[string]int64
}

// permitsLive is rlnode_permits_live{policy}: a collector rather than a
// GaugeVec so a deleted policy's series disappears with it.
type permitsLive struct {
	src  PermitSource
	desc *prometheus.Desc
}

func (p permitsLive) Describe(ch chan<- *prometheus.Desc) { ch <- p.desc }

func (p permitsLive) Collect(ch chan<- prometheus.Metric) {
	for name, n := range p.src.LivePermitsByPolicy() {
		ch <- prometheus.MustNewConstMetric(p.desc, prometheus.GaugeValue, float64(n), name)
	}
}

// WatchPermits exports rlnode_permits_live{policy}: the permits live in
// this node's state (as of the last entry it applied) per concurrency
// policy, 0 for one with none.
func (m *Metrics) WatchPermits(src PermitSource) {
	m.reg.MustRegister(permitsLive{src: src, desc: prometheus.NewDesc("rlnode_permits_live",
		"Concurrency permits live in this node's state (as of the last entry it applied), per concurrency policy.", []string{"policy"}, nil)})
}
