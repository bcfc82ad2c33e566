package cluster

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

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
	n := newRemoval("n3", "", hclog.NewNullLogger())
	for _, s := range steps {
		n.observe(s.servers, s.index)
		if got := n.membership(); got != s.want {
			t.Fatalf("%s: membership %q, want %q", s.what, got, s.want)
		}
		if _, removed := n.Removed(); removed != (s.want == MemberRemoved) {
			t.Fatalf("%s: Removed() = %v", s.what, removed)
		}
	}
	// The leader's notice (or its refusal) needs no configuration: a
	// node removed right after its join was accepted knows it too.
	fresh := newRemoval("n4", "", hclog.NewNullLogger())
	fresh.mark("the leader n1 removed it", 50)
	fresh.observe(nonvoter(cfg("n1"), "n4"), 45)
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
	n := newRemoval("n1", dataDir, hclog.NewNullLogger())
	expect := func(what, want string) {
		t.Helper()
		if got := n.membership(); got != want {
			t.Fatalf("%s: membership %q, want %q", what, got, want)
		}
	}
	n.askingToJoin()
	n.observe(voters("n1", "n2", "n3", "n4"), 45)
	expect("the installed snapshot names its old self", MemberJoining)
	n.observe(voters("n2", "n3", "n4"), 50)
	expect("an entry before the join removed its old self", MemberJoining)
	n.joinedAt(60)
	n.observe(voters("n2", "n3", "n4", "n5"), 55)
	expect("still before the join's index", MemberJoining)

	// Restarted before its log reached the join: the record holds.
	n = newRemoval("n1", dataDir, hclog.NewNullLogger())
	n.wasInCluster()
	n.loadJoinIndex()
	n.observe(voters("n1", "n2", "n3", "n4"), 45)
	n.observe(voters("n2", "n3", "n4"), 50)
	expect("after a restart, before the join", MemberJoining)

	n.observe(append(voters("n2", "n3", "n4", "n5"), raft.Server{ID: "n1", Suffrage: raft.Nonvoter}), 61)
	expect("the join's configuration", MemberActive)
	n.observe(voters("n1", "n2", "n3", "n4", "n5"), 65)
	n.observe(voters("n2", "n3", "n4", "n5"), 70)
	expect("dropped after the join", MemberRemoved)
}

// fakeRaft is the configuration a watch reads.
type fakeRaft struct {
	mu      sync.Mutex
	last    uint64
	servers []raft.Server
	down    bool
}

func (f *fakeRaft) set(last uint64, down bool, servers ...raft.Server) {
	f.mu.Lock()
	f.last, f.down, f.servers = last, down, servers
	f.mu.Unlock()
}
func (f *fakeRaft) lastIndex() uint64 { f.mu.Lock(); defer f.mu.Unlock(); return f.last }
func (f *fakeRaft) shutDown() bool    { f.mu.Lock(); defer f.mu.Unlock(); return f.down }
func (f *fakeRaft) configuration() ([]raft.Server, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.servers, nil
}

// The watch turns what raft holds into the membership state: a voter
// dropped from the configuration is removed, and a raft that shut down
// while the node was a member (a leader removing itself) is removed too;
// one shut down because the node closes is not. The leader's notice
// (RemovedPath) marks it at once, and a notice for another node is
// refused and changes nothing.
func TestRemovalWatchAndNotice(t *testing.T) {
	voter := func(id string) raft.Server { return raft.Server{ID: raft.ServerID(id), Suffrage: raft.Voter} }
	waitFor := func(r *removal, want string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for r.membership() != want {
			if time.Now().After(deadline) {
				t.Fatalf("membership %q, want %q", r.membership(), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	src := &fakeRaft{}
	r := newRemoval("n2", "", hclog.NewNullLogger())
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { r.watch(src, stop, time.Millisecond); close(done) }()
	src.set(10, false, voter("n1"), voter("n2"))
	waitFor(r, MemberActive)
	src.set(20, false, voter("n1"))
	waitFor(r, MemberRemoved)
	if reason, _ := r.Removed(); !strings.Contains(reason, "no longer names it") {
		t.Fatalf("reason %q", reason)
	}
	close(stop)
	<-done

	leader := newRemoval("n1", "", hclog.NewNullLogger())
	src = &fakeRaft{}
	src.set(5, false, voter("n1"), voter("n2"))
	stop = make(chan struct{})
	done = make(chan struct{})
	go func() { leader.watch(src, stop, time.Millisecond); close(done) }()
	waitFor(leader, MemberActive)
	src.set(6, true)
	waitFor(leader, MemberRemoved)
	close(stop)
	<-done

	closing := newRemoval("n3", "", hclog.NewNullLogger())
	src = &fakeRaft{}
	src.set(5, true)
	stop = make(chan struct{})
	close(stop)
	closing.watch(src, stop, time.Millisecond)
	if closing.isRemoved() {
		t.Fatalf("a node whose raft shut down because it closes counts as removed")
	}

	notice := func(r *removal, body string) int {
		w := httptest.NewRecorder()
		r.serveNotice(w, httptest.NewRequest(http.MethodPost, RemovedPath, strings.NewReader(body)))
		return w.Code
	}
	fresh := newRemoval("n4", "", hclog.NewNullLogger())
	if code := notice(fresh, `{"id":"n5","leader":"n1","index":9}`); code != http.StatusBadRequest || fresh.isRemoved() {
		t.Fatalf("a notice for n5 reached n4: %d, removed %v", code, fresh.isRemoved())
	}
	if code := notice(fresh, `{"id":"n4","leader":"n1","index":9}`); code != http.StatusNoContent || !fresh.isRemoved() {
		t.Fatalf("the leader's notice: %d, removed %v", code, fresh.isRemoved())
	}
	if !errors.Is(fresh.notMember(), ErrNotMember) {
		t.Fatalf("notMember() = %v", fresh.notMember())
	}
}
