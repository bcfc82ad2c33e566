package main

import (
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

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

// hungListener accepts connections on loopback and never answers them,
// as a stopped process's socket does (the kernel accepts for it).
func hungListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range held {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// Issue 35, item 12: an address list whose first node takes the
// connection and answers nothing spent the command's whole timeout there
// (30 s by default; the list's next node was never asked). Now it is
// passed over once it answers neither the request nor GET /livez.
func TestAddrListPassesOverAHungNode(t *testing.T) {
	proctest.Long(t)
	n := proctest.StartNode(t, rlnodeBin, "n1")
	proctest.WaitReady(t, n, 15*time.Second)
	hung := hungListener(t)
	env := []string{envAddr + "=" + hung + "," + n.URL()}
	start := time.Now()
	out, errs, code := proctest.Run(t, rlnodeBin, env, "policy", "list", "--timeout", "20s")
	took := time.Since(start)
	t.Logf("RLNODE_ADDR=<hung>,<node> rlnode policy list: exit %d after %s", code, took.Round(time.Millisecond))
	if code != 0 || !strings.Contains(out, "default") {
		t.Fatalf("policy list with a hung first node: exit %d after %s\n%s%s", code, took, out, errs)
	}
	// The last node of a list is waited for, and says what happened.
	_, errs, code = proctest.Run(t, rlnodeBin, []string{envAddr + "=" + hung}, "status", "--timeout", "3s")
	if code == 0 || !strings.Contains(errs, hung) {
		t.Fatalf("status at a hung node alone: exit %d\n%s; want a failure naming it", code, errs)
	}
}

// A scheme other than http or https is refused before anything is sent
// (it was taken for a host name and looked up in DNS).
func TestAddrRefusesOtherSchemes(t *testing.T) {
	for _, addr := range []string{"ftp://h", "file:///x", "127.0.0.1:1,gopher://h:70"} {
		_, errs, code := proctest.Run(t, rlnodeBin, []string{envAddr + "=" + addr}, "status")
		if code != 2 || !strings.Contains(errs, "rlnode nodes speak http:// or https://") {
			t.Errorf("RLNODE_ADDR=%s rlnode status: exit %d\n%s; want exit 2 naming the schemes", addr, code, errs)
		}
	}
}
