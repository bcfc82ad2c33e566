package main

import (
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// TestServeHeaders: a node started with --headers answers a check and a
// forward-auth call with the chosen rate-limit headers only, and the
// default keeps both sets (what the shipped proxy configs forward).
func TestServeHeaders(t *testing.T) {
	ietf := []string{"Ratelimit", "Ratelimit-Policy"}
	legacy := []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"}
	for _, c := range []struct {
		args          []string
		present, gone []string
	}{
		{nil, append(append([]string{}, ietf...), legacy...), nil},
		{[]string{"--headers", "ietf"}, ietf, legacy},
		{[]string{"--headers", "legacy"}, legacy, ietf},
	} {
		n := proctest.StartNode(t, rlnodeBin, "h1", append([]string{"--limit", "2", "--window", "1m"}, c.args...)...)
		proctest.WaitReady(t, n, 15*time.Second)
		for _, path := range []string{"/check/alice", "/v1/auth/default?key=host+path"} {
			r := proctest.MustGet(t, n.URL()+path)
			if r.Status != 200 {
				t.Fatalf("%v %s: %d %s", c.args, path, r.Status, r.Raw)
			}
			for _, k := range c.present {
				if r.Header.Get(k) == "" {
					t.Errorf("%v %s: no %s in %v", c.args, path, k, r.Header)
				}
			}
			for _, k := range c.gone {
				if v := r.Header.Get(k); v != "" {
					t.Errorf("%v %s: %s: %s, want it absent", c.args, path, k, v)
				}
			}
		}
		n.Kill()
	}
}
