package cluster

import (
	"fmt"

	"github.com/hashicorp/go-hclog"
)

// raftLogger is hashicorp/raft's logger with the warnings every clean
// start prints turned down to info, so that a WARN in a node's log means
// something went wrong: the first election of a node that never had a
// leader, a node in no cluster yet finding no peers to elect, and a new,
// empty follower asked for entries it does not have yet.
type raftLogger struct{ hclog.Logger }

func newRaftLogger(l hclog.Logger) hclog.Logger { return raftLogger{l} }

func (l raftLogger) Warn(msg string, args ...any) {
	l.Logger.Log(startupLevel(msg, args), msg, args...)
}

func (l raftLogger) With(args ...any) hclog.Logger    { return raftLogger{l.Logger.With(args...)} }
func (l raftLogger) Named(name string) hclog.Logger   { return raftLogger{l.Logger.Named(name)} }
func (l raftLogger) ResetNamed(n string) hclog.Logger { return raftLogger{l.Logger.ResetNamed(n)} }

// startupLevel is the level of a raft warning: lower for the ones a
// healthy node prints when it first starts (messages of hashicorp/raft v1.7: raft.go,
// replication.go; cmd/rlnode's TestStartupLogsTellOneStory sees them
// go).
func startupLevel(msg string, args []any) hclog.Level {
	switch {
	case msg == "no known peers, aborting election":
		return hclog.Debug // in no cluster yet: whoever adds it logs the story
	case msg == "failed to get previous log" && arg(args, "last-index") == "0":
		return hclog.Debug // an empty follower, about to be sent the log
	case msg == "heartbeat timeout reached, starting election" && arg(args, "last-leader-id") == "":
		return hclog.Info // no leader seen yet
	case msg == "appendEntries rejected, sending older logs" && arg(args, "next") == "1":
		return hclog.Info // catching up an empty follower
	}
	return hclog.Warn
}

// arg is the value after key in a key-value list as text, or "".
func arg(args []any, key string) string {
	for i := 0; i+1 < len(args); i += 2 {
		if k, ok := args[i].(string); ok && k == key {
			return fmt.Sprint(args[i+1])
		}
	}
	return ""
}
