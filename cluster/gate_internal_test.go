package cluster

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/fsm"
)

// fakeGateNode is the gate's node without a cluster: a configuration,
// a leader, members' readings at their addresses, and the data dir's
// format record.
type fakeGateNode struct {
	members    []string // with "n1", this node
	unreadable bool
	lead       bool
	leaderID   string
	// answers: what an immediate reading at an address comes to.
	answers  map[string]ClockReading
	unproven map[string]bool
	asked    []string
	recorded []fsm.Format
	failRec  error
}

func (f *fakeGateNode) servers() ([]raft.Server, bool) {
	if f.unreadable {
		return nil, false
	}
	var out []raft.Server
	for _, id := range f.members {
		out = append(out, raft.Server{ID: raft.ServerID(id), Suffrage: raft.Voter})
	}
	return out, true
}
func (f *fakeGateNode) leading() bool { return f.lead }
func (f *fakeGateNode) leader() (string, string) {
	if f.leaderID == "" {
		return "", ""
	}
	return f.leaderID, f.leaderID + ":http"
}
func (f *fakeGateNode) upgraded() bool { return true }
func (f *fakeGateNode) recordFormat(fm fsm.Format) error {
	if f.failRec != nil {
		return f.failRec
	}
	f.recorded = append(f.recorded, fm)
	return nil
}
func (f *fakeGateNode) readMember(addr, id string) (ClockReading, readResult) {
	f.asked = append(f.asked, addr)
	if f.unproven[addr] {
		return ClockReading{}, readUnproven
	}
	rd, ok := f.answers[addr]
	if !ok {
		return ClockReading{}, readUnreached
	}
	return rd, readProven
}

func newTestGate(f *fakeGateNode) (*VersionGate, *time.Time) {
	now := time.Unix(1000, 0)
	readings := newPeerFormats(func() time.Time { return now })
	return newVersionGate("n1", "this", fsm.CurrentFormat, f, readings, hclog.NewNullLogger()), &now
}

func TestVersionGateOpensWhenEveryMemberReports(t *testing.T) {
	f := &fakeGateNode{members: []string{"n1", "n2", "n3"}, lead: true}
	g, now := newTestGate(f)
	g.readings.record(ClockReading{ID: "n2", Version: "this", Format: fsm.CurrentFormat})

	var up *UpgradingError
	if err := g.RequireFormat(fsm.FormatR4); !errors.As(err, &up) || !slices.Equal(up.Behind, []string{"n3"}) || up.Effective != fsm.OldestFormat {
		t.Fatalf("n3 unheard: RequireFormat(R4) = %v; want an UpgradingError naming n3 at the oldest format", err)
	}
	if !errors.Is(up, ErrClusterUpgrading) || len(f.recorded) != 0 || g.ClusterFormat() != fsm.OldestFormat {
		t.Fatalf("refusal %v recorded %v cluster format %d", up, f.recorded, g.ClusterFormat())
	}
	if err := g.RequireFormat(fsm.OldestFormat); err != nil {
		t.Fatalf("the oldest format is always open: %v", err)
	}

	g.readings.record(ClockReading{ID: "n3", Version: "this", Format: fsm.CurrentFormat})
	if err := g.RequireFormat(fsm.FormatR4); err != nil {
		t.Fatalf("every member at the current format: %v", err)
	}
	if !slices.Equal(f.recorded, []fsm.Format{fsm.CurrentFormat}) {
		t.Fatalf("recorded %v; want the effective format once", f.recorded)
	}
	// Never lowered: n3 goes silent (its reading expires), the format
	// stays open and the cluster's format stays.
	*now = now.Add(2 * clockReadingTTL)
	if eff, _ := g.MemberFormats(); eff != fsm.OldestFormat {
		t.Fatalf("effective with readings expired: %d", eff)
	}
	if err := g.RequireFormat(fsm.CurrentFormat); err != nil || g.ClusterFormat() != fsm.CurrentFormat {
		t.Fatalf("after the mark: %v, cluster format %d", err, g.ClusterFormat())
	}
}

func TestVersionGateUnknownConfigurationAndRecordFailure(t *testing.T) {
	f := &fakeGateNode{unreadable: true}
	g, _ := newTestGate(f)
	if eff, members := g.MemberFormats(); eff != fsm.OldestFormat || len(members) != 1 {
		t.Fatalf("unreadable configuration: %d %v", eff, members)
	}
	f.unreadable, f.members = false, nil
	g.noteCluster()
	if slices.ContainsFunc(f.recorded, func(fm fsm.Format) bool { return fm > fsm.OldestFormat }) {
		t.Fatalf("in no cluster yet, recorded %v; want nothing past the oldest format", f.recorded)
	}
	f.recorded = nil
	f.members = []string{"n1"}
	f.failRec = errors.New("disk full")
	if err := g.RequireFormat(fsm.FormatR4); err == nil {
		t.Fatal("a failed record let the write through; want the error")
	}
	if fsm.Format(g.mark.Load()) > fsm.OldestFormat {
		t.Fatal("marked although the data dir refused the record")
	}
	f.failRec = nil
	g.noteCluster()
	if !slices.Equal(f.recorded, []fsm.Format{fsm.CurrentFormat}) {
		t.Fatalf("noteCluster of a one-node cluster recorded %v", f.recorded)
	}
}

func TestVersionGateAsksTheLeader(t *testing.T) {
	f := &fakeGateNode{members: []string{"n1", "n2"}, leaderID: "n2", unproven: map[string]bool{"n2:http": true}}
	g, _ := newTestGate(f)
	var up *UpgradingError
	if err := g.requireLeader(fsm.FormatR4); !errors.As(err, &up) || !slices.Contains(up.Behind, "n2") {
		t.Fatalf("a leader whose reading proves nothing: %v; want a refusal naming it", err)
	}
	if !slices.Equal(f.asked, []string{"n2:http"}) {
		t.Fatalf("asked %v; want the leader at once", f.asked)
	}
	f.unproven = nil
	f.answers = map[string]ClockReading{"n2:http": {ID: "n2", Format: fsm.CurrentFormat}}
	if err := g.requireLeader(fsm.FormatR4); err != nil {
		t.Fatalf("a leader proving the current format: %v", err)
	}
	if pf, ok := g.readings.get("n2"); !ok || pf.format != fsm.CurrentFormat {
		t.Fatalf("the leader's reading was not kept: %+v %v", pf, ok)
	}
	f.lead = true // on the leader it passes: its own RequireFormat decides
	if err := g.requireLeader(99); err != nil {
		t.Fatalf("on the leader: %v", err)
	}
}

func TestVersionGateChecksAJoiner(t *testing.T) {
	f := &fakeGateNode{members: []string{"n1", "n2"}, answers: map[string]ClockReading{
		"new:http": {ID: "n3", Version: "this", Format: fsm.CurrentFormat},
		"old:http": {ID: "n3"},
	}, unproven: map[string]bool{"impostor:http": true}}
	g, _ := newTestGate(f)
	join := func(addr string) error { return g.checkJoiner(JoinRequest{ID: "n3", HTTPAddr: addr}) }
	if err := join("old:http"); err != nil {
		t.Fatalf("before the gate opened any release joins: %v", err)
	}
	g.loadMark(fsm.CurrentFormat)
	var jf *JoinFormatError
	for _, addr := range []string{"old:http", "impostor:http"} {
		if err := join(addr); !errors.As(err, &jf) || jf.Have != fsm.OldestFormat || !errors.Is(err, ErrConflict) {
			t.Errorf("join at %s after the gate opened: %v; want a JoinFormatError at the oldest format", addr, err)
		}
	}
	if err := join("new:http"); err != nil {
		t.Errorf("a joiner proving the current format: %v", err)
	}
	if err := join("down:http"); err != nil {
		t.Errorf("a joiner not started yet is let in (as a non-voter, old for the gate): %v", err)
	}
}
