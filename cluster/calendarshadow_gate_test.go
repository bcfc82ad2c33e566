package cluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/policy"
)

// A calendar or shadow policy needs log format R4 on every voter (older
// nodes halt on their option bits): a 3-node cluster with one voter still
// at R3 refuses them before the log, through the leader and through a
// follower, and changes nothing, while a policy without them goes
// through; once that voter is new, they go through too.
func TestCalendarAndShadowPoliciesWaitForEveryVoter(t *testing.T) {
	r3 := fsm.FormatR3
	c := clustertest.Start(t, 3, clustertest.Options{Limit: 3, Formats: map[string]fsm.Format{"n1": r3, "n2": r3, "n3": r3}})
	for _, n := range c.Nodes[:2] { // n1 and n2 upgraded, n3 not
		n.Stop()
		n.Format = 0
		n.Restart()
	}
	leader := c.WaitReady(10 * time.Second)
	old := c.Nodes[2]
	clustertest.Poll(t, 10*time.Second, func() error {
		if err := leader.RequireFormat(fsm.FormatR4); err == nil {
			return errors.New("the gate is open with n3 at R3")
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	cal := policy.Fixed("monthly", 1000, 0)
	cal.Limits[0].Window, _ = policy.ParseWindow("1mo")
	cal.Align, cal.Timezone = policy.AlignCalendar, "Europe/Berlin"
	sh := policy.Fixed("shadowed", 10, time.Minute)
	sh.Mode = policy.Shadow
	for _, p := range []policy.Policy{cal, sh} {
		for _, n := range c.Live() {
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
	if _, err := c.Followers(leader)[0].SetPolicy(ctx, policy.Fixed("plain", 5, time.Minute)); err != nil {
		t.Fatalf("a policy without the new options: %v", err)
	}

	old.Stop()
	old.Format = 0
	old.Restart()
	// A leader (perhaps a new one after the restart) opens the gate once it
	// has heard every voter's format.
	for _, p := range []policy.Policy{cal, sh} {
		clustertest.Poll(t, 15*time.Second, func() error {
			_, err := c.Followers(c.Leader(10 * time.Second))[0].SetPolicy(ctx, p)
			return err
		})
	}
}
