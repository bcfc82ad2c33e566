package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// RLNODE_ADDR, set once, is where every admin command goes: a comma list
// is tried in order (a node that is down is passed over), --addr wins over
// it, and --help says so. policy list and get show a leased policy as
// leased.
func TestAdminAddrFromEnvironment(t *testing.T) {
	proctest.Long(t)
	nodes := proctest.StartCluster(t, rlnodeBin, 3)
	_, follower := followerOf(t, nodes)
	down := "http://" + proctest.FreeAddr(t) // nothing listens there
	env := []string{envAddr + "=" + down + "," + follower.URL()}
	run := func(env []string, args ...string) (string, string, int) {
		t.Helper()
		return proctest.Run(t, rlnodeBin, env, args...)
	}

	if out, errs, code := run(env, "policy", "set", "api", "--algorithm", "fixed_window", "--limit", "100", "--window", "1m", "--consistency", "leased"); code != 0 {
		t.Fatalf("%s rlnode policy set: exit %d\n%s%s", env[0], code, out, errs)
	}
	out, errs, code := run(env, "policy", "list")
	if code != 0 {
		t.Fatalf("policy list: exit %d\n%s%s", code, out, errs)
	}
	if !regexp.MustCompile(`(?m)^NAME\s+ALGORITHM\s+CONSISTENCY\s+LIMITS$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^api\s+fixed_window\s+leased\s+100/1m$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^default\s+fixed_window\s+strict\s`).MatchString(out) {
		t.Fatalf("policy list shows no leased api policy:\n%s", out)
	}
	if out, errs, code := run(env, "policy", "get", "api"); code != 0 || !strings.Contains(out, "leased") {
		t.Fatalf("policy get api: exit %d, want it leased:\n%s%s", code, out, errs)
	}

	// The flag wins: with --addr naming the closed port the command fails
	// there, though RLNODE_ADDR names a live node.
	_, errs, code = run([]string{envAddr + "=" + follower.URL()}, "policy", "list", "--addr", down)
	if code == 0 || !strings.Contains(errs, "connection refused") || !strings.Contains(errs, down) {
		t.Fatalf("--addr %s with RLNODE_ADDR set: exit %d\n%s; want the flag's address refused", down, code, errs)
	}
	if help, _, _ := run(nil, "policy", "list", "--help"); !strings.Contains(help, "$RLNODE_ADDR") {
		t.Fatalf("policy list --help does not name $RLNODE_ADDR:\n%s", help)
	}
}
