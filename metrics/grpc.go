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
