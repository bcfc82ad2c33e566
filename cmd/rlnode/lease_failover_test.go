package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// A node restarted a moment ago has not replayed its log yet: the policy
// table it holds may lack a policy defined long ago. Asked for a lease of
// that policy right away, it must not say the policy does not exist (404
// unknown_policy: a holder would give up on it); it reads the table on the
// leader instead. Before the fix the restarted follower answered 404 for
// as long as it was behind.
func TestLeaseRightAfterRestartIsNever404(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	nodes := proctest.StartCluster(t, rlnodeBin, 3)
	leader := leaderOf(t, nodes)
	var follower *proctest.Node
	for _, n := range nodes {
		if n != leader {
			follower = n
			break
		}
	}
	body := map[string]any{"policy": "late-api", "client": "k", "holder": "restart-test", "want": 1}
	for round := 1; round <= 3; round++ {
		// A policy the restarted node only has in its log (never in a
		// snapshot): defined now, then the node is killed and started.
		name := fmt.Sprintf("late-api-%d", round)
		putLeasedPolicy(t, leader, name, 100, "1s")
		body["policy"] = name
		proctest.Poll(t, 20*time.Second, func() error {
			r, err := follower.Do("POST", "/v1/leases", "", body)
			if err != nil || r.Status != 200 {
				return fmt.Errorf("lease on %s before the restart: %v %d %s", follower.ID, err, r.Status, r.Raw)
			}
			return nil
		})
		follower.Kill()
		follower.Restart()
		var statuses []int
		deadline := time.Now().Add(30 * time.Second)
		for {
			r, err := follower.Do("POST", "/v1/leases", "", body)
			if err == nil {
				statuses = append(statuses, r.Status)
				if r.Status == 404 {
					t.Fatalf("round %d: %s answered 404 for policy %s right after its restart: %s (answers so far: %v)",
						round, follower.ID, name, r.Raw, statuses)
				}
				if r.Status == 200 {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no grant from %s within 30s of its restart; answers: %v (last error %v)", round, follower.ID, statuses, err)
			}
			time.Sleep(2 * time.Millisecond)
		}
		t.Logf("round %d: answers of %s from its restart to the first grant: %v", round, follower.ID, compact(statuses))
	}
}

// compact writes repeated statuses once with a count.
func compact(s []int) string {
	out := ""
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && s[j] == s[i] {
			j++
		}
		out += fmt.Sprintf("%dx%d ", s[i], j-i)
		i = j
	}
	return out
}
