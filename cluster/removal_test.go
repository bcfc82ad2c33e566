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

// Issue 41: "removed" is never read from a configuration older than the
// node's own join. n1 joins empty; before the join's answer arrives it
// installs the leader's snapshot, whose configuration names n1's old
// incarnation as a voter, then entries older than the join, one of which
// removed that old incarnation. None of that is this node's removal;
// neither is anything before the join's index, after a restart too. A
// configuration after the join that drops it is.
func TestRemovalIgnoresConfigurationsOlderThanTheJoin(t *testing.T) {
	voters := func(ids ...string) []raft.Server {
		var out []raft.Server
		for _, id := range ids {
			out = append(out, raft.Server{ID: raft.ServerID(id), Suffrage: raft.Voter})
		}
		return out
	}
	dataDir := t.TempDir()
	n := &Node{cfg: Config{ID: "n1", DataDir: dataDir}, log: hclog.NewNullLogger()}
	expect := func(what, want string) {
		t.Helper()
		if got := n.membership(); got != want {
			t.Fatalf("%s: membership %q, want %q", what, got, want)
		}
	}
	n.askingToJoin()
	n.observeConfiguration(voters("n1", "n2", "n3", "n4"), 45)
	expect("the installed snapshot names its old self", MemberJoining)
	n.observeConfiguration(voters("n2", "n3", "n4"), 50)
	expect("an entry before the join removed its old self", MemberJoining)
	n.joinedAt(60)
	n.observeConfiguration(voters("n2", "n3", "n4", "n5"), 55)
	expect("still before the join's index", MemberJoining)

	// Restarted before its log reached the join: the record holds.
	n = &Node{cfg: Config{ID: "n1", DataDir: dataDir}, log: hclog.NewNullLogger()}
	n.wasInCluster()
	n.loadJoinIndex()
	n.observeConfiguration(voters("n1", "n2", "n3", "n4"), 45)
	n.observeConfiguration(voters("n2", "n3", "n4"), 50)
	expect("after a restart, before the join", MemberJoining)

	n.observeConfiguration(append(voters("n2", "n3", "n4", "n5"), raft.Server{ID: "n1", Suffrage: raft.Nonvoter}), 61)
	expect("the join's configuration", MemberActive)
	n.observeConfiguration(voters("n1", "n2", "n3", "n4", "n5"), 65)
	n.observeConfiguration(voters("n2", "n3", "n4", "n5"), 70)
	expect("dropped after the join", MemberRemoved)
}
