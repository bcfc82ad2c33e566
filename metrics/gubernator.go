package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// maxGubernatorNames bounds the name label of gubernator items: names
// come from callers, so past this many distinct ones the rest count as
// "_other" instead of growing the scrape without bound.
const maxGubernatorNames = 256

type gubMetrics struct {
	items *prometheus.CounterVec
	mu    sync.Mutex
	names map[string]struct{}
}

func newGubMetrics(reg *prometheus.Registry) *gubMetrics {
	g := &gubMetrics{names: map[string]struct{}{}, items: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rlnode_gubernator_items_total",
		Help: "Items of gubernator's GetRateLimits answered by this node, by item name (the first 256 names; later ones as _other) and result (under_limit, over_limit, error, full).",
	}, []string{"name", "result"})}
	reg.MustRegister(g.items)
	return g
}

// GubernatorItem implements gubapi.Observer.
func (m *Metrics) GubernatorItem(name, result string) {
	if m == nil {
		return
	}
	g := m.gub
	g.mu.Lock()
	if _, ok := g.names[name]; !ok {
		if len(g.names) < maxGubernatorNames {
			g.names[name] = struct{}{}
		} else {
			name = "_other"
		}
	}
	g.mu.Unlock()
	g.items.WithLabelValues(name, result).Inc()
}
