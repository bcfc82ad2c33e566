package cluster

import (
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// "Removed" is "was a member and no longer is", never "not yet a member":
// a node waiting to be added, or catching up from the start of the log
// through configurations that predate it, is joining; a voter whose
// configuration drops it is removed; only a newer configuration naming it
// again (an operator's rlnode join) ends a removal.
func TestMembershipFromConfigurations(t *testing.T) {
	cfg := func(ids ...string) []raft.Server {
		var out []raft.Server
		for _, id := range ids {
			out = append(out, raft.Server{ID: raft.ServerID(id), Suffrage: raft.Voter})
		}
		return out
	}
	nonvoter := func(servers []raft.Server, id string) []raft.Server {
		return append(servers, raft.Server{ID: raft.ServerID(id), Suffrage: raft.Nonvoter})
	}
	steps := []struct {
		what    string
		servers []raft.Server
		index   uint64
		want    string
	}{
		{"waiting to be added: no configuration", nil, 0, MemberJoining},
		{"catching up: the bootstrap configuration", cfg("n1"), 1, MemberJoining},
		{"catching up: a later one without it", cfg("n1", "n2"), 5, MemberJoining},
		{"added as a non-voter", nonvoter(cfg("n1", "n2"), "n3"), 9, MemberActive},
		{"dropped as a non-voter (the promoter: not caught up; the join asks again)", cfg("n1", "n2"), 12, MemberJoining},
		{"added again, promoted", cfg("n1", "n2", "n3"), 20, MemberActive},
		{"removed", cfg("n1", "n2"), 30, MemberRemoved},
		{"an older configuration naming it (a stale read)", cfg("n1", "n2", "n3"), 30, MemberRemoved},
		{"added back by an operator", nonvoter(cfg("n1", "n2"), "n3"), 40, MemberActive},
	}
	n := &Node{cfg: Config{ID: "n3"}, log: hclog.NewNullLogger()}
	for _, s := range steps {
		n.observeConfiguration(s.servers, s.index)
		if got := n.membership(); got != s.want {
			t.Fatalf("%s: membership %q, want %q", s.what, got, s.want)
		}
		if _, removed := n.Removed(); removed != (s.want == MemberRemoved) {
			t.Fatalf("%s: Removed() = %v", s.what, removed)
		}
	}
	// The leader's notice (or its refusal) needs no configuration: a
	// node removed right after its join was accepted knows it too.
	fresh := &Node{cfg: Config{ID: "n4"}, log: hclog.NewNullLogger()}
	fresh.markRemoved("the leader n1 removed it", 50)
	fresh.observeConfiguration(nonvoter(cfg("n1"), "n4"), 45)
	if got := fresh.membership(); got != MemberRemoved {
		t.Fatalf("notified node with an older configuration naming it: %q, want removed", got)
	}
}
