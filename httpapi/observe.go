package httpapi

import "time"

// Observer records what the check endpoints answered (metrics.Metrics
// implements it).
type Observer interface {
	ObserveCheck(policy, result string, start time.Time)
}

func (a *API) observeCheck(policy, result string, start time.Time) {
	if a.cfg.Metrics != nil {
		a.cfg.Metrics.ObserveCheck(policy, result, start)
	}
}
