package cluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/policy"
)

// A whole-table write names the version it was computed from; the leader
// refuses it once any other write changed the table in between, wherever
// the read, the other write and the replace are sent, and the refused
// write changes nothing.
func TestReplaceRefusesAStaleTableVersion(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{Limit: 3})
	leader := c.Leader(5 * time.Second)
	fs := c.Followers(leader)
	f1, f2 := fs[0], fs[1]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	read, err := f1.ReadPolicies(ctx, false)
	if err != nil || read.Version == "" {
		t.Fatalf("read via a follower: %+v %v", read, err)
	}
	if stale, _ := leader.ReadPolicies(ctx, true); stale.Version != read.Version {
		t.Fatalf("the leader's own table is version %s, the forwarded read said %s", stale.Version, read.Version)
	}
	// Another writer adds a policy through another node.
	if _, err := f2.SetPolicy(ctx, policy.Fixed("added-meanwhile", 5, time.Minute)); err != nil {
		t.Fatal(err)
	}
	mine := append(read.Policies, policy.Fixed("mine", 7, time.Minute))
	_, err = f1.ReplacePolicies(ctx, mine, read.Version)
	if !errors.Is(err, cluster.ErrTableChanged) {
		t.Fatalf("replace computed from the table before the add: %v; want ErrTableChanged", err)
	}
	if _, ok := leader.Policy("mine"); ok {
		t.Fatal("the refused replace wrote its table")
	}
	if _, ok := leader.Policy("added-meanwhile"); !ok {
		t.Fatal("the concurrent add is gone")
	}

	// Read again, redo the change: it goes through and says the new version.
	again, err := f1.ReadPolicies(ctx, false)
	if err != nil || again.Version == read.Version {
		t.Fatalf("re-read: version %s (was %s), %v", again.Version, read.Version, err)
	}
	ch, err := f1.ReplacePolicies(ctx, append(again.Policies, policy.Fixed("mine", 7, time.Minute)), again.Version)
	if err != nil || len(ch.Added) != 1 || ch.Version == again.Version {
		t.Fatalf("replace from the current version: %+v %v", ch, err)
	}
	if now, _ := leader.ReadPolicies(ctx, false); now.Version != ch.Version {
		t.Fatalf("the write answered version %s, the table is %s", ch.Version, now.Version)
	}
	// A write that changes nothing leaves the version as it is, and an
	// unconditional one (If-Match: *) is taken whatever the table.
	if _, err := leader.SetPolicy(ctx, policy.Fixed("mine", 7, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := f2.ReplacePolicies(ctx, append(again.Policies, policy.Fixed("mine", 7, time.Minute)), ch.Version); err != nil {
		t.Fatalf("replace after a no-op write: %v", err)
	}
	if _, err := f2.ReplacePolicies(ctx, again.Policies, cluster.AnyVersion); err != nil {
		t.Fatalf("unconditional replace: %v", err)
	}
	if _, ok := leader.Policy("mine"); ok {
		t.Fatal("the unconditional replace did not remove mine")
	}
}
