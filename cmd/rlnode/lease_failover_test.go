package main

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
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
	proctest.Long(t)
	nodes := proctest.StartCluster(t, rlnodeBin, 3)
	leader, follower := followerOf(t, nodes)
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

// appLine is one decision or error an application logged.
type appLine struct {
	at   time.Time
	kind string // allow, deny or error
	text string
}

// appLines reads the allow, deny and error lines of applications.
func appLines(apps []*proctest.Proc) []appLine {
	var out []appLine
	for _, a := range apps {
		for _, line := range strings.Split(a.Output(), "\n") {
			kind, rest, _ := strings.Cut(line, " ")
			if kind != "allow" && kind != "deny" && kind != "error" {
				continue
			}
			ns, text, _ := strings.Cut(rest, " ")
			v, err := strconv.ParseInt(ns, 10, 64)
			if err != nil {
				continue
			}
			out = append(out, appLine{at: time.Unix(0, v), kind: kind, text: text})
		}
	}
	return out
}

// between counts the decisions and lists the errors logged in [from, to).
func between(lines []appLine, from, to time.Time) (decisions int, errs []string) {
	for _, l := range lines {
		if l.at.Before(from) || !l.at.Before(to) {
			continue
		}
		if l.kind == "error" {
			errs = append(errs, l.at.Format("15:04:05.000")+" "+l.text)
		} else {
			decisions++
		}
	}
	return decisions, errs
}

// An application deciding a leased key through client.Local at about 200
// hits a second, through all three nodes, while the leader is stopped
// (SIGSTOP: it takes connections and answers nothing) for about 9 s: a
// few seconds after the other two elect a new leader, and while the old
// one is still stopped, its hits are decided again with no errors; after
// SIGCONT too; and no window ever admits more than the limit. Before the
// per-attempt budget, client.Local kept sending to the stopped node and
// made about one decision a second, each an error after its timeout.
func TestLeasedApplicationSurvivesAStoppedLeader(t *testing.T) {
	proctest.Long(t)
	const limit = 150 // per second, under a demand of about 200/s
	app := buildLeaseApp(t)
	nodes := proctest.StartCluster(t, rlnodeBin, 3)
	putLeasedPolicy(t, nodes[0], "hung-api", limit, "1s")
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.HTTPAddr)
	}
	apps := []*proctest.Proc{proctest.Start(t, app, "app", "-addrs", strings.Join(addrs, ","),
		"-policy", "hung-api", "-key", "k", "-holders", "1", "-every", "5ms", "-lease", "1s")}
	proctest.Poll(t, 60*time.Second, func() error {
		if n := len(admissions(t, apps)); n < 2*limit {
			return fmt.Errorf("warm-up: %d admissions", n)
		}
		return nil
	})

	old := leaderOf(t, nodes)
	stopped := time.Now()
	if err := syscall.Kill(old.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			syscall.Kill(old.Pid(), syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	var elected time.Time
	proctest.Poll(t, 30*time.Second, func() error {
		for _, n := range nodes {
			if n == old {
				continue
			}
			st, err := proctest.Status(n)
			if err == nil && st["leaderId"] != nil && st["leaderId"] != "" && st["leaderId"] != old.ID {
				elected = time.Now()
				return nil
			}
		}
		return fmt.Errorf("no new leader yet")
	})
	// A user's "a few seconds" after the election, until the old leader
	// comes back: at least 3 s of it to look at.
	const settle = 4 * time.Second
	until := stopped.Add(9 * time.Second)
	if min := elected.Add(settle + 3*time.Second); until.Before(min) {
		until = min
	}
	time.Sleep(time.Until(until))
	resume()
	cont := time.Now()
	time.Sleep(6 * time.Second)
	apps[0].Signal(syscall.SIGTERM, 20*time.Second)

	lines := appLines(apps)
	d, errs := between(lines, stopped, elected)
	t.Logf("leader %s stopped; new leader seen %s later; %d decisions and %d errors meanwhile",
		old.ID, elected.Sub(stopped).Round(time.Millisecond), d, len(errs))
	d, errs = between(lines, elected, elected.Add(settle))
	t.Logf("first %s after the election: %d decisions, %d errors", settle, d, len(errs))
	d, errs = between(lines, elected.Add(settle), cont)
	t.Logf("from %s after the election until SIGCONT (%s): %d decisions, %d errors", settle,
		cont.Sub(elected.Add(settle)).Round(time.Millisecond), d, len(errs))
	if len(errs) > 0 || d < 50 {
		t.Errorf("with the old leader still stopped, %s after the new one's election: %d decisions and %d errors, want decisions and no errors; errors: %v",
			settle, d, len(errs), head(errs, 5))
	}
	d, errs = between(lines, cont.Add(3*time.Second), cont.Add(6*time.Second))
	t.Logf("3 to 6 s after SIGCONT: %d decisions, %d errors", d, len(errs))
	if len(errs) > 0 || d < 50 {
		t.Errorf("after the old leader resumed: %d decisions and %d errors, want decisions and no errors; errors: %v", d, len(errs), head(errs, 5))
	}
	checkNeverOver(t, admissions(t, apps), limit)
}

func head(s []string, n int) []string { return s[:min(n, len(s))] }
