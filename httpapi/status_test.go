package httpapi_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/httpapi/apitest"
)

// Right after a window ends /v1/status reads as no window (used 0,
// remaining the limit), never "inactive, used 3, remaining 3"; the lapsed
// window as stored is in lastWindowStart and lastUsed until it expires.
func TestStatusAfterTheWindowEnds(t *testing.T) {
	c := apitest.Start(t, 1, clustertest.Options{Limit: 3, Window: 400 * time.Millisecond})
	n := c.Leader(5 * time.Second)
	for range 3 {
		do(t, "GET", n.URL()+"/check/ann", "", "")
	}
	a := do(t, "GET", n.URL()+"/v1/status/ann", "", "")
	if a.body["active"] != true || a.body["used"] != 3.0 || a.body["remaining"] != 0.0 {
		t.Fatalf("status in the window: %s", a.raw)
	}
	start := a.body["windowStart"]
	clustertest.Poll(t, 5*time.Second, func() error {
		a = do(t, "GET", n.URL()+"/v1/status/ann", "", "")
		if a.body["active"] != false {
			return fmt.Errorf("still active: %s", a.raw)
		}
		return nil
	})
	lim := a.body["limits"].([]any)[0].(map[string]any)
	for _, f := range []map[string]any{a.body, lim} {
		if f["used"] != 0.0 || f["remaining"] != 3.0 || f["resetAt"] != 0.0 || f["lastWindowStart"] != start || f["lastUsed"] != 3.0 {
			t.Fatalf("status after the window: %s; want used 0, remaining 3, resetAt 0, lastWindowStart %v, lastUsed 3", a.raw, start)
		}
	}
	if ws, ok := a.body["windowStart"]; ok && ws != 0.0 {
		t.Fatalf("status after the window names a current windowStart: %s", a.raw)
	}
}
