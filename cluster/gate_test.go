package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/cluster/storage"
	"github.com/rlnode/rlnode/fsm"
)

// gateRefuses is nil when n's gate refuses a format-R4 write naming
// exactly the servers behind, else why not.
func gateRefuses(n *clustertest.Node, behind ...string) error {
	err := n.RequireFormat(fsm.FormatR4)
	var ue *cluster.UpgradingError
	if !errors.As(err, &ue) || !errors.Is(err, cluster.ErrClusterUpgrading) {
		return fmt.Errorf("%s: RequireFormat(R4) = %v; want an UpgradingError", n.ID, err)
	}
	if ue.Need != fsm.FormatR4 || ue.Effective != fsm.FormatR3 || !slices.Equal(ue.Behind, behind) {
		return fmt.Errorf("%s: %+v; want need 4, effective 3, behind %v", n.ID, ue, behind)
	}
	return nil
}

// TestVersionGateOpensWhenEveryMemberIsNew: a cluster of the previous
// format upgraded but for one node refuses writes that need the new one, on the leader and
// on followers, naming that node; once it restarts on the new format the
// gate opens on every node without an operator step, and every data dir
// records the new format, so a node of the old format may not join and
// rolling a node back is refused at start. A member that is down counts
// as old before the gate opens, and changes nothing after.
func TestVersionGateOpensWhenEveryMemberIsNew(t *testing.T) {
	r3 := fsm.FormatR3
	c := clustertest.Start(t, 3, clustertest.Options{Formats: map[string]fsm.Format{"n1": r3, "n2": r3, "n3": r3, "n4": r3}})
	for _, n := range c.Nodes[:2] {
		n.Stop()
		n.Format = 0
		n.Restart()
	}
	c.WaitReady(10 * time.Second)
	old := c.Nodes[2]

	for _, n := range c.Live() {
		clustertest.Poll(t, 10*time.Second, func() error { return gateRefuses(n, old.ID) })
		if st := n.Status(); st.ClusterFormat != fsm.FormatR3 {
			t.Fatalf("%s: status clusterFormat %d with %s old; want 3", n.ID, st.ClusterFormat, old.ID)
		}
	}
	for _, n := range c.Nodes {
		if f, _, err := storage.ReadFormat(n.Dir); err != nil || f != fsm.FormatR3 {
			t.Fatalf("%s: data dir records format %d (%v) while %s is old; want 3", n.ID, f, err, old.ID)
		}
	}
	if _, members := c.Nodes[0].VersionGate().MemberFormats(); len(members) != 3 {
		t.Fatalf("member formats: %+v", members)
	}

	// Down, the old node is unknown: the gate stays closed.
	old.Stop()
	for _, n := range c.Live() {
		if err := gateRefuses(n, old.ID); err != nil {
			t.Fatalf("with %s down: %v", old.ID, err)
		}
	}
	old.Format = 0
	old.Restart()
	for _, n := range c.Live() {
		clustertest.Poll(t, 10*time.Second, func() error { return n.RequireFormat(fsm.FormatR4) })
		clustertest.Poll(t, 5*time.Second, func() error {
			if f, _, err := storage.ReadFormat(n.Dir); err != nil || f != fsm.CurrentFormat {
				return fmt.Errorf("%s: data dir records format %d (%v) with every member new; want %d", n.ID, f, err, fsm.CurrentFormat)
			}
			return nil
		})
	}
	if st := c.Nodes[0].Status(); st.ClusterFormat != fsm.CurrentFormat || st.Format != fsm.CurrentFormat {
		t.Fatalf("status with every member new: format %d, clusterFormat %d; want %d", st.Format, st.ClusterFormat, fsm.CurrentFormat)
	}

	// A node of the old format may not join now: the log may hold
	// format-4 entries it cannot apply.
	stale := c.StartNode(false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := c.Nodes[1].Join(ctx, cluster.JoinRequest{ID: stale.ID, RaftAddr: stale.RaftAddr, HTTPAddr: stale.HTTPAddr})
	if !errors.Is(err, cluster.ErrConflict) || !strings.Contains(fmt.Sprint(err), fmt.Sprintf("may hold format %d entries and n4 runs log format 3", fsm.CurrentFormat)) {
		t.Fatalf("join of a format-3 node after the gate opened (asked through a member that may not lead): %v; want a conflict naming formats 3 and %d", err, fsm.CurrentFormat)
	}
	if _, members := c.Nodes[0].VersionGate().MemberFormats(); len(members) != 3 {
		t.Fatalf("members after the refused join: %+v; want the three", members)
	}
	stale.Stop()

	// Rolling a node back now is refused at start: its data dir may hold
	// format-4 entries.
	back := c.Nodes[0]
	back.Stop()
	back.Format = fsm.FormatR3
	_, err = storage.Open(storage.Options{Dir: back.Dir, ID: back.ID, Reads: fsm.FormatR3})
	if !errors.Is(err, storage.ErrFormatTooNew) {
		t.Fatalf("rolled-back node opening its data dir: %v; want ErrFormatTooNew", err)
	}
	back.Format = 0
	back.Restart()

	// Once open, the gate stays open: a member not heard from for longer
	// than the reading TTL (10 s) does not close it (the log may hold
	// format-4 entries already; what could come back older is refused
	// at start or at join).
	down := c.Nodes[1]
	down.Stop()
	time.Sleep(11 * time.Second)
	for _, n := range []*clustertest.Node{c.Nodes[0], c.Nodes[2]} {
		if err := n.RequireFormat(fsm.FormatR4); err != nil {
			t.Fatalf("%s with %s down after the gate opened: %v; want it open", n.ID, down.ID, err)
		}
	}
}
