package cluster

import (
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Raft's clean-start warnings go down a level; the same messages in a
// running cluster (a leader was known, a follower with a log) stay WARN.
func TestRaftStartupLevel(t *testing.T) {
	for _, c := range []struct {
		msg  string
		args []any
		want hclog.Level
	}{
		{"no known peers, aborting election", nil, hclog.Debug},
		{"heartbeat timeout reached, starting election", []any{"last-leader-addr", raft.ServerAddress(""), "last-leader-id", raft.ServerID("")}, hclog.Info},
		{"heartbeat timeout reached, starting election", []any{"last-leader-addr", raft.ServerAddress("a:1"), "last-leader-id", raft.ServerID("n1")}, hclog.Warn},
		{"failed to get previous log", []any{"previous-index", uint64(1), "last-index", uint64(0), "error", "log not found"}, hclog.Debug},
		{"failed to get previous log", []any{"previous-index", uint64(90), "last-index", uint64(40), "error", "log not found"}, hclog.Warn},
		{"appendEntries rejected, sending older logs", []any{"peer", "n2", "next", uint64(1)}, hclog.Info},
		{"appendEntries rejected, sending older logs", []any{"peer", "n2", "next", uint64(77)}, hclog.Warn},
		{"failed to contact", []any{"server-id", "n2"}, hclog.Warn},
	} {
		if got := startupLevel(c.msg, c.args); got != c.want {
			t.Errorf("%q %v: level %v, want %v", c.msg, c.args, got, c.want)
		}
	}
}
