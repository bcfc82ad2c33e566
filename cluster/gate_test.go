package cluster_test

import (
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

// TestVersionGateOpensWhenEveryMemberIsNew: a cluster with one node of the
// previous format refuses writes that need the new one, on the leader and
// on followers, naming that node; once it restarts on the new format the
// gate opens on every node without an operator step, and every data dir
// records the new format, so rolling a node back is refused at start. A
// member that goes silent counts as old again.
func TestVersionGateOpensWhenEveryMemberIsNew(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{Formats: map[string]fsm.Format{"n3": fsm.FormatR3}})
	old := c.Nodes[2]

	for _, n := range c.Live() {
		clustertest.Poll(t, 10*time.Second, func() error { return gateRefuses(n, old.ID) })
		if st := n.Status(); st.ClusterFormat != fsm.FormatR3 {
			t.Fatalf("%s: status clusterFormat %d with %s old; want 3", n.ID, st.ClusterFormat, old.ID)
		}
	}
	// n1 and n2 were a cluster of new nodes before n3 joined, and
	// recorded format 4 then; the old node never records it.
	if f, _, err := storage.ReadFormat(old.Dir); err != nil || f != fsm.FormatR3 {
		t.Fatalf("%s: data dir records format %d (%v) on a format-3 node; want 3", old.ID, f, err)
	}
	if _, members := c.Nodes[0].MemberFormats(); len(members) != 3 {
		t.Fatalf("member formats: %+v", members)
	}

	old.Stop()
	old.Format = 0
	old.Restart()
	for _, n := range c.Live() {
		clustertest.Poll(t, 10*time.Second, func() error { return n.RequireFormat(fsm.FormatR4) })
		clustertest.Poll(t, 5*time.Second, func() error {
			if f, _, err := storage.ReadFormat(n.Dir); err != nil || f != fsm.FormatR4 {
				return fmt.Errorf("%s: data dir records format %d (%v) with every member new; want 4", n.ID, f, err)
			}
			return nil
		})
	}
	if st := c.Nodes[0].Status(); st.ClusterFormat != fsm.CurrentFormat || st.Format != fsm.CurrentFormat {
		t.Fatalf("status with every member new: format %d, clusterFormat %d; want %d", st.Format, st.ClusterFormat, fsm.CurrentFormat)
	}

	// Rolling a node back now is refused at start: its data dir may hold
	// format-4 entries.
	back := c.Nodes[0]
	back.Stop()
	back.Format = fsm.FormatR3
	_, err := storage.Open(storage.Options{Dir: back.Dir, ID: back.ID, Reads: fsm.FormatR3})
	if !errors.Is(err, storage.ErrFormatTooNew) {
		t.Fatalf("rolled-back node opening its data dir: %v; want ErrFormatTooNew", err)
	}
	back.Format = 0
	back.Restart()

	// A member not heard from for the reading TTL (10 s) counts as old.
	down := c.Nodes[1]
	down.Stop()
	for _, n := range []*clustertest.Node{c.Nodes[0], c.Nodes[2]} {
		clustertest.Poll(t, 20*time.Second, func() error { return gateRefuses(n, down.ID) })
	}
}

// TestDataDirOfNewerFormatIsRefused: a node whose build reads an older
// format than its data dir records refuses to open it, naming both
// formats and the release that raised it, instead of replaying entries
// it cannot apply; a data dir without the record reads as format 3.
func TestDataDirOfNewerFormatIsRefused(t *testing.T) {
	dir := t.TempDir()
	if f, v, err := storage.ReadFormat(dir); err != nil || f != fsm.FormatR3 || v != "" {
		t.Fatalf("data dir without %s: format %d %q %v; want 3", storage.FormatFile, f, v, err)
	}
	if err := storage.RaiseFormat(dir, fsm.FormatR4, "v9.9.9"); err != nil {
		t.Fatal(err)
	}
	if err := storage.RaiseFormat(dir, fsm.FormatR3, "v0.0.1"); err != nil {
		t.Fatal(err)
	}
	if f, v, _ := storage.ReadFormat(dir); f != fsm.FormatR4 || v != "v9.9.9" {
		t.Fatalf("after raising to 4 and asking for 3: %d %q; want 4 by v9.9.9 (never lowered)", f, v)
	}
	_, err := storage.Open(storage.Options{Dir: dir, ID: "n1", Reads: fsm.FormatR3, Version: "v0.3.0"})
	var tooNew *storage.FormatTooNewError
	if !errors.As(err, &tooNew) || !errors.Is(err, storage.ErrFormatTooNew) {
		t.Fatalf("open with a build reading format 3: %v; want FormatTooNewError", err)
	}
	for _, want := range []string{"format 4", "v9.9.9", "v0.3.0", "3 to 3"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("refusal %q does not name %q", err, want)
		}
	}
	d, err := storage.Open(storage.Options{Dir: dir, ID: "n1", Reads: fsm.FormatR4})
	if err != nil {
		t.Fatalf("open with a build reading format 4: %v", err)
	}
	d.Close()
}
