package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/cluster/transport"
	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
	"github.com/rlnode/rlnode/fsm"
)

// writeToken writes a token file in the test's temp dir.
func writeToken(t *testing.T, tok string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// attacker sends Raft RPCs with hashicorp/raft's own NetworkTransport, over
// the stream layer given (plain TCP for an outsider).
type attacker struct {
	trans *raft.NetworkTransport
}

func newAttacker(t *testing.T, stream raft.StreamLayer) *attacker {
	t.Helper()
	if stream == nil {
		s, err := transport.ListenTCP("127.0.0.1:0", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		stream = s
	}
	tr := raft.NewNetworkTransport(stream, 2, 3*time.Second, io.Discard)
	t.Cleanup(func() { tr.Close() })
	return &attacker{trans: tr}
}

func (a *attacker) header() raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("mallory"), Addr: []byte(a.trans.LocalAddr())}
}

// timeoutNow tells the target to start an election at once.
func (a *attacker) timeoutNow(n *proctest.Node) error {
	var resp raft.TimeoutNowResponse
	return a.trans.TimeoutNow(raft.ServerID(n.ID), raft.ServerAddress(n.RaftAddr), &raft.TimeoutNowRequest{RPCHeader: a.header()}, &resp)
}

// installEmptySnapshot sends a well-formed snapshot of an empty state
// machine at a far higher term and index: accepted, it erases every window.
func (a *attacker) installEmptySnapshot(t *testing.T, n *proctest.Node, term uint64) error {
	t.Helper()
	snap, err := fsm.New(fsm.Config{}).Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	conf := raft.Configuration{Servers: []raft.Server{{ID: raft.ServerID(n.ID), Address: raft.ServerAddress(n.RaftAddr), Suffrage: raft.Voter}}}
	req := &raft.InstallSnapshotRequest{
		RPCHeader: a.header(), SnapshotVersion: 1, Term: term, Leader: []byte(a.trans.LocalAddr()),
		LastLogIndex: 1 << 20, LastLogTerm: term, Configuration: raft.EncodeConfiguration(conf), ConfigurationIndex: 1 << 20,
		Size: int64(sink.Len()),
	}
	var resp raft.InstallSnapshotResponse
	if err := a.trans.InstallSnapshot(raft.ServerID(n.ID), raft.ServerAddress(n.RaftAddr), req, &resp, bytes.NewReader(sink.Bytes())); err != nil {
		return err
	}
	if !resp.Success {
		return errors.New("install snapshot: not successful")
	}
	return nil
}

type memSink struct{ bytes.Buffer }

func (*memSink) ID() string    { return "forged" }
func (*memSink) Cancel() error { return nil }
func (*memSink) Close() error  { return nil }

func status(t *testing.T, n *proctest.Node) (term int64, state string, windows int64) {
	t.Helper()
	st, err := proctest.Status(n)
	if err != nil {
		t.Fatalf("status of %s: %v", n.ID, err)
	}
	f := func(k string) int64 { v, _ := st[k].(float64); return int64(v) }
	s, _ := st["state"].(string)
	return f("term"), s, f("liveWindows")
}

// spendOn makes k hits for client and returns the last remaining count.
func spendOn(t *testing.T, n *proctest.Node, client string, k int) int64 {
	t.Helper()
	var last int64
	for range k {
		r, err := n.Do("GET", "/check/"+client, "", nil)
		if err != nil || r.Status != 200 {
			t.Fatalf("check %s on %s: %v %d %s", client, n.ID, err, r.Status, r.Raw)
		}
		last = r.Num("remaining")
	}
	return last
}

// The attack from issue 12, first on a node run --insecure (it works: that
// is what the rest of the test guards against), then on a node with the
// cluster token, where the same RPCs from raft's own transport are refused
// and the node keeps its term, its leadership and its windows. A client that
// does know the token gets through, so the refusal is the token's doing.
func TestRaftPortRejectsForgedRPCs(t *testing.T) {
	proctest.Long(t)
	t.Run("insecure node is open (control)", func(t *testing.T) {
		n := proctest.StartNode(t, rlnodeBin, "open", "--insecure")
		proctest.WaitReady(t, n, 15*time.Second)
		spendOn(t, n, "alice", 3)
		term0, _, _ := status(t, n)
		a := newAttacker(t, nil)
		if err := a.timeoutNow(n); err != nil {
			t.Fatalf("forged TimeoutNow on an open node: %v (the attack this test guards against no longer reproduces; fix the test)", err)
		}
		if err := a.installEmptySnapshot(t, n, uint64(term0)+100); err != nil {
			t.Fatalf("forged InstallSnapshot on an open node: %v", err)
		}
		proctest.Poll(t, 10*time.Second, func() error {
			if term, _, windows := status(t, n); term <= term0 || windows != 0 {
				return fmt.Errorf("term %d (was %d), %d live windows: forged RPCs had no effect", term, term0, windows)
			}
			return nil
		})
	})

	t.Run("token guards raft", func(t *testing.T) {
		const token = "s3cret-token-for-raft"
		n := proctest.StartNode(t, rlnodeBin, "guarded", "--cluster-token-file", writeToken(t, token))
		proctest.WaitReady(t, n, 15*time.Second)
		if rem := spendOn(t, n, "alice", 3); rem != 7 {
			t.Fatalf("remaining %d after 3 hits, want 7", rem)
		}
		term0, state0, windows0 := status(t, n)
		a := newAttacker(t, nil)
		for i := range 3 {
			if err := a.timeoutNow(n); err == nil {
				t.Fatalf("forged TimeoutNow #%d accepted without the token", i+1)
			}
			if err := a.installEmptySnapshot(t, n, uint64(term0)+100); err == nil {
				t.Fatalf("forged InstallSnapshot #%d accepted without the token", i+1)
			}
		}
		// A wrong token fails the handshake just the same.
		wrong := newAttacker(t, tokenStream(t, "not-the-token"))
		if err := wrong.timeoutNow(n); err == nil {
			t.Fatal("TimeoutNow with a wrong token accepted")
		}
		time.Sleep(500 * time.Millisecond) // room for a wrongly accepted RPC to act
		term, state, windows := status(t, n)
		if term != term0 || state != state0 || windows != windows0 {
			t.Fatalf("after forged RPCs: term %d state %s windows %d; before: term %d state %s windows %d", term, state, windows, term0, state0, windows0)
		}
		if rem := spendOn(t, n, "alice", 1); rem != 6 {
			t.Fatalf("remaining %d after a 4th hit, want 6: the window did not survive", rem)
		}
		if !strings.Contains(n.Output(), "raft connection rejected") {
			t.Errorf("no rejection logged:\n%s", n.Output())
		}
		// Positive control: the same RPC with the token is obeyed.
		friend := newAttacker(t, tokenStream(t, token))
		if err := friend.timeoutNow(n); err != nil {
			t.Fatalf("TimeoutNow with the token: %v", err)
		}
		proctest.Poll(t, 10*time.Second, func() error {
			if term, _, _ := status(t, n); term <= term0 {
				return fmt.Errorf("term still %d after an authenticated TimeoutNow", term)
			}
			return nil
		})
	})
}

// tokenStream is a Raft stream layer that proves token on each dial.
func tokenStream(t *testing.T, token string) raft.StreamLayer {
	t.Helper()
	s, err := transport.ListenTCP("127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return transport.GuardStream(s, transport.RaftSecurity{Token: token}, nil)
}

// fdCount counts a process's open file descriptors.
func fdCount(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Skipf("cannot count file descriptors: %v", err)
	}
	return len(ents)
}

// Connections held open on the Raft port without a handshake are closed by
// the handshake timeout, only a few per address are let in at all, and an
// authenticated connection that goes quiet is closed by the idle timeout:
// the node's file descriptors stay bounded.
func TestRaftHeldOpenConnectionsClosed(t *testing.T) {
	proctest.Long(t)
	const token, perIP = "held-open-token", 8
	n := proctest.StartNode(t, rlnodeBin, "held", "--cluster-token-file", writeToken(t, token),
		"--raft-handshake-timeout", "1s", "--raft-idle-timeout", "2s", "--raft-max-conns-per-ip", fmt.Sprint(perIP))
	proctest.WaitReady(t, n, 15*time.Second)
	base := fdCount(t, n.Pid())

	const held = 200
	conns := make([]net.Conn, 0, held)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range held {
		c, err := net.DialTimeout("tcp", n.RaftAddr, 2*time.Second)
		if err != nil {
			t.Fatalf("dial raft port: %v", err)
		}
		conns = append(conns, c)
	}
	time.Sleep(300 * time.Millisecond)
	if fds := fdCount(t, n.Pid()); fds > base+perIP+4 {
		t.Fatalf("%d connections held open: node has %d file descriptors (%d before); want at most %d more", held, fds, base, perIP+4)
	}
	// Every one of them is closed by the node within the handshake timeout
	// (beyond the cap: at once).
	start := time.Now()
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
			t.Fatalf("held connection %d still open after %s: %v", i, time.Since(start), err)
		}
	}
	t.Logf("all %d held connections closed %s after the check began (handshake timeout 1s)", held, time.Since(start).Round(time.Millisecond))

	// An authenticated connection left idle is closed by the idle timeout.
	ok, err := tokenStream(t, token).Dial(raft.ServerAddress(n.RaftAddr), 3*time.Second)
	if err != nil {
		t.Fatalf("authenticated dial: %v", err)
	}
	defer ok.Close()
	start = time.Now()
	ok.SetReadDeadline(time.Now().Add(15 * time.Second))
	if _, err := ok.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("idle authenticated connection not closed by the node after %s: %v", time.Since(start), err)
	}
	t.Logf("idle authenticated connection closed after %s (idle timeout 2s)", time.Since(start).Round(time.Millisecond))
	if r := proctest.MustGet(t, n.URL()+"/readyz"); r.Status != 200 {
		t.Fatalf("node not ready after the flood: %d %s", r.Status, r.Raw)
	}
	// SIGHUP (a TLS reload) on a node without TLS is logged, not fatal.
	if err := syscallHUP(n); err != nil {
		t.Fatal(err)
	}
	proctest.Poll(t, 5*time.Second, func() error {
		if !strings.Contains(n.Output(), "nothing to reload") {
			return errors.New("SIGHUP not logged")
		}
		return nil
	})
	if r := proctest.MustGet(t, n.URL()+"/readyz"); r.Status != 200 {
		t.Fatalf("node not ready after SIGHUP: %d %s", r.Status, r.Raw)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// A node listening beyond loopback with neither token nor mutual TLS
// refuses to start and says how to fix it; --insecure or a token lets it.
func TestServeRefusesOpenNonLoopback(t *testing.T) {
	proctest.Long(t)
	dir := t.TempDir()
	_, stderr, code := proctest.Run(t, rlnodeBin, []string{"RLNODE_CLUSTER_TOKEN=", "RLNODE_CLUSTER_TOKEN_FILE="},
		"serve", "--http-addr", "0.0.0.0:0", "--raft-addr", "127.0.0.1:0", "--http-advertise", "127.0.0.1:1", "--data-dir", dir)
	if code == 0 {
		t.Fatalf("serve on 0.0.0.0 without token or TLS exited 0; stderr:\n%s", stderr)
	}
	for _, want := range []string{"refusing to start", "--http-addr 0.0.0.0:0", "--cluster-token-file", "--tls-ca", "rlnode tls init", "--insecure"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("refusal does not mention %q:\n%s", want, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "raft.db")); err == nil {
		t.Errorf("refused node still created its Raft log")
	}
	// pprof has no authentication: beyond loopback only with --insecure.
	_, stderr, code = proctest.Run(t, rlnodeBin, nil, "serve", "--cluster-token-file", writeToken(t, "tok"), "--pprof-addr", "0.0.0.0:0", "--data-dir", t.TempDir())
	if code == 0 || !strings.Contains(stderr, "--pprof-addr") {
		t.Errorf("pprof on 0.0.0.0: exit %d, %s", code, stderr)
	}
	// TLS without a CA authenticates no one who dials in: still refused.
	certs := t.TempDir()
	proctest.TLSInit(t, rlnodeBin, certs, "n1")
	_, stderr, code = proctest.Run(t, rlnodeBin, nil, "serve", "--http-addr", "0.0.0.0:0", "--http-advertise", "127.0.0.1:1", "--data-dir", t.TempDir(),
		"--tls-cert", filepath.Join(certs, "n1.pem"), "--tls-key", filepath.Join(certs, "n1-key.pem"))
	if code == 0 || !strings.Contains(stderr, "refusing to start") {
		t.Errorf("TLS without CA or token on 0.0.0.0: exit %d, %s", code, stderr)
	}
	// With a token from a file, or told --insecure, it starts.
	for _, extra := range [][]string{{"--cluster-token-file", writeToken(t, "tok")}, {"--insecure"}} {
		port := strings.Split(proctest.FreeAddr(t), ":")[1]
		n := proctest.StartNode(t, rlnodeBin, "wide", append([]string{"--http-addr", "0.0.0.0:" + port, "--http-advertise", "127.0.0.1:" + port}, extra...)...)
		n.HTTPAddr = "127.0.0.1:" + port
		proctest.WaitReady(t, n, 15*time.Second)
		n.Kill()
	}
	_, stderr, code = proctest.Run(t, rlnodeBin, nil, "serve", "--cluster-token", "a", "--cluster-token-file", writeToken(t, "b"), "--data-dir", t.TempDir())
	if code != 2 || !strings.Contains(stderr, "exclude each other") {
		t.Errorf("token flag and file together: exit %d, %s", code, stderr)
	}
}

// Raft connections the node closes as idle are redialled by the peers: a
// cluster whose pooled and pipeline connections all went idle serves the
// next hits as before.
func TestRaftIdleTimeoutKeepsClusterServing(t *testing.T) {
	proctest.Long(t)
	nodes := proctest.StartCluster(t, rlnodeBin, 3, "--cluster-token-file", writeToken(t, "idle-token"), "--raft-idle-timeout", "1s")
	for round := range 3 {
		for i, n := range nodes {
			r, err := n.Do("GET", fmt.Sprintf("/check/idle-%d-%d", round, i), "", nil)
			if err != nil || r.Status != 200 {
				t.Fatalf("round %d, hit via %s: %v %d %s", round, n.ID, err, r.Status, r.Raw)
			}
		}
		time.Sleep(2500 * time.Millisecond) // every connection without heartbeats goes idle
	}
	for _, n := range nodes {
		out := n.Output()
		t.Logf("%s: %d raft RPC errors logged (retried), %d terms", n.ID, strings.Count(out, "failed to appendEntries")+strings.Count(out, "failed to heartbeat"), strings.Count(out, "entering candidate state"))
	}
}
