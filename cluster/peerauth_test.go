package cluster

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// fixedView is a node's own view: the configuration it restored, and
// whether it leads.
type fixedView struct {
	servers []raft.Server
	index   uint64
	leader  bool
}

func (v *fixedView) configuration() ([]raft.Server, uint64) { return v.servers, v.index }
func (v *fixedView) leading() bool                          { return v.leader }

// members answers for each member what its configuration holds; an
// absent member does not answer.
type members struct {
	configs map[string][]string
	asked   atomic.Int32
}

func (m *members) askConfiguration(_ context.Context, id string) (ConfigurationAnswer, error) {
	m.asked.Add(1)
	ids, ok := m.configs[id]
	if !ok {
		return ConfigurationAnswer{}, errors.New("unreachable")
	}
	ans := ConfigurationAnswer{ID: id}
	for _, s := range ids {
		ans.Servers = append(ans.Servers, ConfigServer{ID: s, Voter: true})
	}
	return ans, nil
}

func voters(ids ...string) []raft.Server {
	var out []raft.Server
	for _, id := range ids {
		out = append(out, raft.Server{ID: raft.ServerID(id), Suffrage: raft.Voter})
	}
	return out
}

// Issue 41: n1 joined empty and installed the leader's latest snapshot,
// taken before the leader n5 was added back: the configuration it
// restored is {n1..n4}, without n5. The leader must still get in (a
// member, asked, names it), while a node no member names (removed, or
// never added) stays out, and a leader, whose configuration is the
// cluster's, asks no one.
func TestPeerAuthAdmitsTheLeaderARestoredSnapshotLacks(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	restored := &fixedView{servers: voters("n1", "n2", "n3", "n4"), index: 40}
	cluster := &members{configs: map[string][]string{
		// n2 is up to date; n3 lags as n1 does; n4 does not answer.
		"n2": {"n2", "n3", "n4", "n5", "n1"},
		"n3": {"n1", "n2", "n3", "n4"},
	}}
	a := newPeerAuth("n1", restored, cluster, clock, hclog.NewNullLogger())

	for _, id := range []string{"n2", "n3", "n4"} {
		if err := a.authorize(id); err != nil {
			t.Fatalf("%s, in the restored configuration: %v", id, err)
		}
	}
	if cluster.asked.Load() != 0 {
		t.Fatalf("asked the members about members of its own configuration")
	}
	if err := a.authorize("n5"); err != nil {
		t.Fatalf("the leader n5, missing from the restored snapshot's configuration: %v", err)
	}
	asked := cluster.asked.Load()
	// A burst of raft's pooled connections asks once.
	for range 8 {
		if err := a.authorize("n5"); err != nil {
			t.Fatalf("n5 again: %v", err)
		}
	}
	if got := cluster.asked.Load(); got != asked {
		t.Fatalf("asked %d more times within the answer's lifetime", got-asked)
	}

	// A node no member names: refused, and said so.
	err := a.authorize("n9")
	if !errors.Is(err, ErrNotMember) {
		t.Fatalf("n9, named by no member: %v, want ErrNotMember", err)
	}
	if r, ok := a.lastRefusal(); !ok || r.Node != "n9" || r.LastIndex != 40 || r.Leading {
		t.Fatalf("last refusal %+v %v, want n9 at configuration 40", r, ok)
	}

	// Once the answer is old, the members are asked again: n5 removed
	// meanwhile is refused.
	now = now.Add(vouchedFor + time.Second)
	cluster.configs["n2"] = []string{"n1", "n2", "n3", "n4"}
	if err := a.authorize("n5"); !errors.Is(err, ErrNotMember) {
		t.Fatalf("n5 after every member dropped it: %v, want ErrNotMember", err)
	}
	now = now.Add(refusalMemory + time.Second)
	if r, ok := a.lastRefusal(); ok {
		t.Fatalf("a refusal older than a minute still reported: %+v", r)
	}

	// A leader's configuration is the cluster's: it refuses a non-member
	// without asking anyone (the round-3 attack's non-member node
	// certificate, on a one-node cluster).
	lead := &members{configs: map[string][]string{"n2": {"n1", "n2", "n9"}}}
	leader := newPeerAuth("n1", &fixedView{servers: voters("n1", "n2"), index: 7, leader: true}, lead, clock, hclog.NewNullLogger())
	if err := leader.authorize("n9"); !errors.Is(err, ErrNotMember) {
		t.Fatalf("leader admitted a non-member: %v", err)
	}
	if lead.asked.Load() != 0 {
		t.Fatalf("a leader asked its followers")
	}
	// A node that knows no configuration yet (waiting to be added) hears
	// from any node.
	if err := newPeerAuth("n1", &fixedView{}, lead, clock, hclog.NewNullLogger()).authorize("n7"); err != nil {
		t.Fatalf("a node with no configuration refused n7: %v", err)
	}
}
