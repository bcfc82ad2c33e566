package proctest

import (
	"testing"
	"time"

	"github.com/rlnode/rlnode/internal/delayproxy"
)

// DelayProxy is internal/delayproxy's proxy (delay each way, cut, heal,
// delay spikes), shared with jepsen-lite's multi-cluster mode.
type DelayProxy = delayproxy.Proxy

// StartDelayProxy listens on a free loopback port and forwards to target
// with delay each way; the test's cleanup stops it.
func StartDelayProxy(t testing.TB, target string, delay time.Duration) *DelayProxy {
	t.Helper()
	p, err := delayproxy.Start(target, delay)
	if err != nil {
		t.Fatalf("delay proxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}
