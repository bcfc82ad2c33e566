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

// A calendar or shadow policy needs log format R4 on every voter (older
// nodes halt on their option bits): a 3-node cluster whose other voters
// have not confirmed a format refuses them before the log, through the
// leader and through a follower, and changes nothing; a policy without
// them still goes through. (When the version gate lands, this cluster
// needs a voter that reports R3: clustertest's Formats option there.)
func TestCalendarAndShadowPoliciesWaitForEveryVoter(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{Limit: 3})
	leader := c.Leader(5 * time.Second)
	follower := c.Followers(leader)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	cal := policy.Fixed("monthly", 1000, 0)
	cal.Limits[0].Window, _ = policy.ParseWindow("1mo")
	cal.Align, cal.Timezone = policy.AlignCalendar, "Europe/Berlin"
	sh := policy.Fixed("shadowed", 10, time.Minute)
	sh.Mode = policy.Shadow
	for _, p := range []policy.Policy{cal, sh} {
		for _, n := range []*clustertest.Node{leader, follower} {
			_, err := n.SetPolicy(ctx, p)
			var up *cluster.UpgradingError
			var he *cluster.HTTPError // the leader's answer to a follower
			switch {
			case errors.As(err, &up) && len(up.Behind) > 0:
			case errors.As(err, &he) && he.Status == 409 && he.Code == "cluster_upgrading":
			default:
				t.Fatalf("%s via %s: %v; want ErrClusterUpgrading naming the voters behind, or its 409", p.Name, n.ID, err)
			}
			if _, ok := leader.Policy(p.Name); ok {
				t.Fatalf("the refused %s reached the table", p.Name)
			}
		}
	}
	if _, err := follower.SetPolicy(ctx, policy.Fixed("plain", 5, time.Minute)); err != nil {
		t.Fatalf("a policy without the new options: %v", err)
	}
}
