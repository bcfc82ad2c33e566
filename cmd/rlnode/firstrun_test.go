package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// The command line as a new user meets it: help asked for is on stdout
// (`rlnode join --help | less`), a mistake is a few lines on stderr with a
// did-you-mean and where the help is, never the whole flag list.
func TestFirstRunCommandLine(t *testing.T) {
	for _, args := range [][]string{{"serve", "--help"}, {"join", "--help"}, {"peers", "-h"}, {"policy", "set", "-h"},
		{"bench", "-h"}, {"tls", "init", "-h"}, {"migrate-log", "-h"}, {"recover", "-h"}, {"restore", "-h"}, {"help"}, {"help", "join"}} {
		out, stderr, code := proctest.Run(t, rlnodeBin, nil, args...)
		if code != 0 || !strings.HasPrefix(out, "usage: rlnode") || stderr != "" {
			t.Errorf("rlnode %v: exit %d, stdout %.60q, stderr %.200q; want the help on stdout, nothing on stderr", args, code, out, stderr)
		}
	}

	mistakes := []struct {
		args []string
		want []string
	}{
		{[]string{"serve", "--windw", "5s"}, []string{"rlnode serve: unknown flag --windw (did you mean --window?)", "see `rlnode serve -h`"}},
		{[]string{"--hlep"}, []string{"did you mean --help?"}},
		{[]string{"join", "--raft-adr", "x"}, []string{"did you mean --raft-addr?", "see `rlnode join -h`"}},
		{[]string{"servee"}, []string{`rlnode: unknown command "servee" (did you mean serve?)`, "see `rlnode help`"}},
		{[]string{"serve", "--window", "5"}, []string{"--window 5: a duration needs a unit: write 5s"}},
		{[]string{"bench", "--duration", "10"}, []string{"--duration 10: a duration needs a unit"}},
		{[]string{"policy", "lsit"}, []string{`unknown subcommand "lsit" (did you mean list?)`, "see `rlnode policy -h`"}},
	}
	for _, m := range mistakes {
		out, stderr, code := proctest.Run(t, rlnodeBin, nil, m.args...)
		if code != 2 || out != "" {
			t.Errorf("rlnode %v: exit %d, stdout %q; want 2 and nothing on stdout", m.args, code, out)
		}
		for _, w := range m.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("rlnode %v: stderr lacks %q:\n%s", m.args, w, stderr)
			}
		}
		if n := strings.Count(stderr, "\n"); n > 3 {
			t.Errorf("rlnode %v: %d lines on stderr, want at most 3 (no flag dump):\n%s", m.args, n, stderr)
		}
	}

	// serve's help is grouped, and a switch shows no argument.
	out, _, _ := proctest.Run(t, rlnodeBin, nil, "serve", "-h")
	for _, w := range []string{"\ncluster:\n", "\nsecurity:\n", "\ntuning:\n", "\ntesting only", "\n  --wait-for-join\n"} {
		if !strings.Contains(out, w) {
			t.Errorf("serve -h lacks %q", w)
		}
	}

	// A bad policy file is the file's problem, not a usage mistake.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("policies: [{name: a, algorithm: foo}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"serve", "--policies", bad, "--data-dir", t.TempDir()}, {"policy", "apply", "-f", bad, "--addr", "http://" + closedAddr(t)}} {
		_, stderr, code := proctest.Run(t, rlnodeBin, nil, args...)
		if code == 0 || strings.Contains(stderr, "usage") || !strings.Contains(stderr, `algorithm "foo" is unknown`) {
			t.Errorf("rlnode %v: exit %d, stderr %q; want the file's error without \"usage\"", args[:2], code, stderr)
		}
	}

	// Nothing listens: said once, with a hint.
	_, stderr, code := proctest.Run(t, rlnodeBin, nil, "peers", "--addr", "http://"+closedAddr(t))
	if code != 1 || strings.Count(stderr, "connection refused") != 1 || !strings.Contains(stderr, "is rlnode serve running?") {
		t.Errorf("peers against a closed port: exit %d, stderr %q", code, stderr)
	}
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	return proctest.FreeAddr(t)
}

// A node's first minutes tell one story: a fresh one-node cluster logs no
// WARN and no limit its flags seeded, only the replicated policy; a node
// forming a three-node cluster names the nodes it has not met, in its log
// and in `rlnode peers`, and the node that bootstrapped does not claim to
// have joined.
func TestStartupLogsTellOneStory(t *testing.T) {
	one := proctest.StartNode(t, rlnodeBin, "solo", "--limit", "7")
	proctest.WaitReady(t, one, 15*time.Second)
	proctest.Poll(t, 10*time.Second, func() error {
		if !strings.Contains(one.Output(), "policy default (replicated)") {
			return fmt.Errorf("no line with the replicated default policy yet")
		}
		return nil
	})
	log := one.Output()
	for _, bad := range []string{"[WARN]", "[ERROR]", "limit=", "waiting to be added", "joined the cluster"} {
		if strings.Contains(log, bad) {
			t.Errorf("a fresh one-node cluster logged %q:\n%s", bad, log)
		}
	}
	if !strings.Contains(log, `policy="default fixed_window 7/1m"`) {
		t.Errorf("the replicated default policy is not in the log:\n%s", log)
	}
	if missing := linesNotInReadme(t, log); len(missing) > 0 {
		t.Errorf("the README's one-node log leaves out lines a fresh node logs: %q", missing)
	}

	proctest.Long(t)
	nodes := make([]*proctest.Node, 3)
	var urls []string
	for i := range nodes {
		id := fmt.Sprintf("n%d", i+1)
		nodes[i] = &proctest.Node{ID: id, HTTPAddr: proctest.FreeAddr(t), RaftAddr: proctest.FreeAddr(t), DataDir: filepath.Join(t.TempDir(), id)}
		urls = append(urls, nodes[i].URL())
	}
	start := func(n *proctest.Node) {
		n.Proc = proctest.Start(t, rlnodeBin, n.ID, "serve", "--id", n.ID, "--http-addr", n.HTTPAddr, "--raft-addr", n.RaftAddr,
			"--data-dir", n.DataDir, "--bootstrap-expect", "3", "--join", strings.Join(urls, ","))
	}
	start(nodes[0])
	notMet := "not reached yet: " + urls[1] + ", " + urls[2]
	proctest.Poll(t, 15*time.Second, func() error {
		if !strings.Contains(nodes[0].Output(), notMet) {
			return fmt.Errorf("n1's log does not name the nodes it has not met yet")
		}
		return nil
	})
	out, stderr, code := proctest.Run(t, rlnodeBin, nil, "peers", "--addr", nodes[0].URL())
	if code != 0 || !strings.Contains(out, "no servers: forming a cluster of 3 (--bootstrap-expect)") || !strings.Contains(out, notMet) {
		t.Errorf("rlnode peers on a node still forming the cluster: exit %d\n%s%s", code, out, stderr)
	}
	start(nodes[1])
	start(nodes[2])
	for _, n := range nodes {
		proctest.WaitReady(t, n, 30*time.Second)
	}
	proctest.WaitVoters(t, nodes[0], 3, 20*time.Second)
	for _, n := range nodes {
		proctest.Poll(t, 10*time.Second, func() error {
			if !strings.Contains(n.Output(), "this node is one of its voters") {
				return fmt.Errorf("%s has not said it is a voter", n.ID)
			}
			return nil
		})
		log := n.Output()
		for _, bad := range []string{"[WARN]", "[ERROR]", "waiting to be added", "joined the cluster", "limit="} {
			if strings.Contains(log, bad) {
				t.Errorf("%s logged %q while the cluster formed:\n%s", n.ID, bad, log)
			}
		}
	}
}

// Answers say what a user needs to act: a token bucket's refusal its rate
// and burst, a 401 every way to give the token, a restore into a cluster
// with windows the flag that overrides it.
func TestFirstRunMessages(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n := proctest.StartNode(t, rlnodeBin, "m1", "--cluster-token-file", tokenFile)
	proctest.WaitReady(t, n, 15*time.Second)
	env := []string{"RLNODE_CLUSTER_TOKEN_FILE=" + tokenFile}
	if _, stderr, code := proctest.Run(t, rlnodeBin, env, "policy", "set", "user", "--algorithm", "token_bucket",
		"--limit", "10", "--window", "1m", "--burst", "20", "--addr", n.URL()); code != 0 {
		t.Fatalf("policy set: %s", stderr)
	}
	proctest.MustGet(t, n.URL()+"/check/user/u1?cost=20")
	r := proctest.MustGet(t, n.URL()+"/check/user/u1")
	if detail := fmt.Sprint(r.JSON["detail"]); r.Status != 429 || !strings.Contains(detail, "(10 per 1m, burst 20)") {
		t.Errorf("token bucket refusal: %d %q; want its rate and burst", r.Status, detail)
	}
	r = proctest.MustGet(t, n.URL()+"/check/user/u2?cost=25")
	if detail := fmt.Sprint(r.JSON["detail"]); r.Status != 422 || !strings.Contains(detail, "capacity 20 of the bucket (10 per 1m, burst 20)") {
		t.Errorf("cost above the bucket: %d %q", r.Status, detail)
	}
	r, err := n.Do("DELETE", "/v1/windows/user/u1", "", nil)
	if err != nil || r.Status != 401 || !strings.Contains(fmt.Sprint(r.JSON["detail"]), "RLNODE_CLUSTER_TOKEN_FILE") {
		t.Errorf("401: %v %d %s; want it to name RLNODE_CLUSTER_TOKEN_FILE", err, r.Status, r.Raw)
	}
	backup := filepath.Join(t.TempDir(), "b.bin")
	if _, stderr, code := proctest.Run(t, rlnodeBin, env, "backup", "--out", backup, "--addr", n.URL()); code != 0 {
		t.Fatalf("backup: %s", stderr)
	}
	_, stderr, code := proctest.Run(t, rlnodeBin, env, "restore", backup, "--addr", n.URL())
	if code == 0 || !strings.Contains(stderr, "--force") {
		t.Errorf("restore into a cluster with windows: exit %d, %q; want it refused, naming --force", code, stderr)
	}
}

// logMessage is the message of one of rlnode's own log lines (not Raft's).
var logMessage = regexp.MustCompile(`(?m)\[INFO\]\s+rlnode: (.+?): node=`)

// linesNotInReadme lists the messages of a fresh node's log (up to its
// replicated default policy) that "Run one node" in the README, which
// says the log tells the story, does not show.
func linesNotInReadme(t *testing.T, log string) []string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	shown := map[string]bool{}
	for _, m := range logMessage.FindAllStringSubmatch(string(readme), -1) {
		shown[m[1]] = true
	}
	var missing []string
	for _, m := range logMessage.FindAllStringSubmatch(log, -1) {
		if !shown[m[1]] {
			missing = append(missing, m[1])
		}
		if m[1] == "policy default (replicated)" {
			break
		}
	}
	return missing
}

// `rlnode --help` names every policy subcommand that `rlnode policy --help`
// lists, so a reader of the command list finds import-envoy and sync-envoy.
func TestHelpNamesEveryPolicyCommand(t *testing.T) {
	top, _, _ := proctest.Run(t, rlnodeBin, nil, "--help")
	var line string
	for _, l := range strings.Split(top, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == "policy" {
			line = l
		}
	}
	usage, stderr, _ := proctest.Run(t, rlnodeBin, nil, "policy", "--help")
	usage += stderr
	n := 0
	for _, l := range strings.Split(usage, "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || f[0] != "rlnode" || f[1] != "policy" {
			continue
		}
		n++
		if !strings.Contains(line, f[2]) {
			t.Errorf("rlnode --help's policy line %q does not name `rlnode policy %s`", line, f[2])
		}
	}
	if n == 0 {
		t.Fatalf("rlnode policy --help lists no subcommands:\n%s", usage)
	}
}
