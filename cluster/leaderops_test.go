package cluster_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/policy"
)

// Every leader operation asked of a follower is served by the leader over
// the cluster's own internal endpoints: the nodes here serve no public API
// at all. Errors come back as the cluster's own (errors.Is), and a backup
// taken and restored through a follower round-trips.
func TestFollowerForwardsEveryLeaderOperation(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{Limit: 3, Token: "s3cret"})
	leader := c.Leader(5 * time.Second)
	f := c.Followers(leader)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	res, err := f.SetPolicy(ctx, policy.Fixed("api", 2, time.Minute))
	if err != nil || res != "added" {
		t.Fatalf("set policy via follower: %q %v", res, err)
	}
	ps, err := f.ReadPolicies(ctx, false)
	if err != nil || len(ps.Policies) != 2 {
		t.Fatalf("read policies via follower: %+v %v", ps, err)
	}
	if _, err := f.CheckAll(ctx, []cluster.Hit{{Policy: "api", Client: "alice", Cost: 1}}); err != nil {
		t.Fatal(err)
	}
	p, err := f.Peek(ctx, "api", "alice", false)
	if err != nil || p.Used != 1 || p.ServedBy != leader.ID {
		t.Fatalf("peek via follower: %+v %v; want used 1 served by %s", p, err, leader.ID)
	}
	if _, err := f.Peek(ctx, "nope", "alice", false); !errors.Is(err, cluster.ErrUnknownPolicy) {
		t.Fatalf("peek of an unknown policy via follower: %v; want ErrUnknownPolicy", err)
	}

	var backup bytes.Buffer
	if err := f.Backups().Backup(ctx, &backup); err != nil || backup.Len() == 0 {
		t.Fatalf("backup via follower: %d bytes, %v", backup.Len(), err)
	}
	if _, err := f.Backups().RestoreBackup(ctx, bytes.NewReader(backup.Bytes()), int64(backup.Len()), false); !errors.Is(err, cluster.ErrNotEmpty) {
		t.Fatalf("restore into a cluster with windows via follower: %v; want ErrNotEmpty", err)
	}
	found, err := f.ResetKey(ctx, "api", "alice")
	if err != nil || !found {
		t.Fatalf("reset via follower: %v %v", found, err)
	}
	restored, err := f.Backups().RestoreBackup(ctx, bytes.NewReader(backup.Bytes()), int64(backup.Len()), true)
	if err != nil || restored.LiveWindows != 1 || restored.ServedBy != leader.ID {
		t.Fatalf("forced restore via follower: %+v %v; want 1 window restored by %s", restored, err, leader.ID)
	}
	if _, err := f.Backups().RestoreBackup(ctx, bytes.NewReader([]byte("not a backup")), 12, true); !errors.Is(err, cluster.ErrInvalidBackup) {
		t.Fatalf("restore of garbage via follower: %v; want ErrInvalidBackup", err)
	}

	if err := f.DeletePolicy(ctx, "api"); err != nil {
		t.Fatalf("delete policy via follower: %v", err)
	}
	if err := f.DeletePolicy(ctx, "api"); !errors.Is(err, cluster.ErrUnknownPolicy) {
		t.Fatalf("second delete via follower: %v; want ErrUnknownPolicy", err)
	}
	if err := f.Remove(ctx, "nobody"); !errors.Is(err, cluster.ErrUnknownServer) {
		t.Fatalf("remove of a stranger via follower: %v; want ErrUnknownServer", err)
	}
}
