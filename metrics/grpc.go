package metrics

import "github.com/prometheus/client_golang/prometheus"

func newGRPCRefused(reg *prometheus.Registry) *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rlnode_grpc_streams_refused_total",
		Help: "Calls and streams a gRPC port refused with RESOURCE_EXHAUSTED, by port (rls, rlqs) and budget (node: --grpc-max-streams, credential: --grpc-max-streams-per-credential).",
	}, []string{"port", "budget"})
	reg.MustRegister(v)
	return v
}

// GRPCRefused implements grpcserve.Observer.
func (m *Metrics) GRPCRefused(port, budget string) { m.grpcRefused.WithLabelValues(port, budget).Inc() }

// WatchGRPCPort exports what a gRPC port holds, read at scrape time: its
// open calls and streams, and for the quota port (buckets not nil) the
// buckets its streams have.
func (m *Metrics) WatchGRPCPort(port string, streams, buckets func() int) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "rlnode_grpc_streams_open", Help: "Calls and streams open on a gRPC port (health checks not counted).",
		ConstLabels: prometheus.Labels{"port": port},
	}, func() float64 { return float64(streams()) }))
	if buckets != nil {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "rlnode_rlqs_buckets", Help: "Buckets the quota port's streams have (bounded by --rlqs-max-buckets).",
		}, func() float64 { return float64(buckets()) }))
	}
}
