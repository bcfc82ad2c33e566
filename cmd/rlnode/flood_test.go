package main

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// startLimitedNode is proctest.StartNode with the process's descriptor
// limit (soft and hard) set to nofile, as a small container or an old
// systemd default would have it.
func startLimitedNode(t *testing.T, id string, nofile int, extra ...string) *proctest.Node {
	t.Helper()
	n := &proctest.Node{ID: id, HTTPAddr: proctest.FreeAddr(t), RaftAddr: proctest.FreeAddr(t), DataDir: filepath.Join(t.TempDir(), id)}
	args := append([]string{"-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, nofile), rlnodeBin,
		"serve", "--id", id, "--http-addr", n.HTTPAddr, "--raft-addr", n.RaftAddr, "--data-dir", n.DataDir}, extra...)
	n.Proc = proctest.Start(t, "/bin/sh", id, args...)
	return n
}

// flood holds silent connections to addr from many loopback source
// addresses (127.1.x.y), perAddr from each, dialling again whenever the
// node closes one, until stop is called.
func flood(t *testing.T, addr string, addrs, perAddr int) (stop func(), held, dialed *atomic.Int64) {
	t.Helper()
	held, dialed = &atomic.Int64{}, &atomic.Int64{}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i := range addrs {
		src := &net.TCPAddr{IP: net.IPv4(127, 1, byte(i/250), byte(1+i%250))}
		d := net.Dialer{LocalAddr: src, Timeout: 2 * time.Second}
		for range perAddr {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-done:
						return
					default:
					}
					c, err := d.Dial("tcp", addr)
					if err != nil {
						select {
						case <-done:
							return
						case <-time.After(200 * time.Millisecond):
						}
						continue
					}
					held.Add(1)
					dialed.Add(1)
					go func() { <-done; c.Close() }()
					c.Read(make([]byte, 1)) // until the node closes it
					held.Add(-1)
					c.Close()
					select {
					case <-done:
						return
					case <-time.After(200 * time.Millisecond):
					}
				}
			}()
		}
	}
	var once sync.Once
	stop = func() { once.Do(func() { close(done); wg.Wait() }) }
	t.Cleanup(stop)
	return stop, held, dialed
}

// The attack of issue 17, item 2: silent connections to the Raft port
// from many source addresses took the node's descriptors, until Raft and
// HTTP accepts failed with EMFILE. Here the node has a 1024-descriptor
// limit and 200 addresses hold 8 silent connections each (1600 > 1024),
// on a token cluster (so each sits in its handshake until the timeout):
// the budget of pending handshakes keeps it far from the limit; while the
// flood is held, a leader adds it to the cluster through the flooded port,
// heartbeats it, and /check through it is answered.
func TestRaftFloodFromManyAddresses(t *testing.T) {
	token := writeToken(t, "flood-token")
	n1 := proctest.StartNode(t, rlnodeBin, "n1", "--cluster-token-file", token)
	proctest.WaitReady(t, n1, 15*time.Second)
	n2 := startLimitedNode(t, "n2", 1024, "--cluster-token-file", token, "--wait-for-join")
	proctest.Poll(t, 15*time.Second, func() error {
		_, err := net.DialTimeout("tcp", n2.RaftAddr, time.Second)
		return err
	})
	if !strings.Contains(n2.Output(), "file descriptor limit") {
		t.Errorf("n2 does not log its descriptor limit")
	}

	stop, held, dialed := flood(t, n2.RaftAddr, 200, 8)
	proctest.Poll(t, 30*time.Second, func() error {
		if d := dialed.Load(); d < 3200 {
			return fmt.Errorf("%d flood connections made so far", d)
		}
		return nil
	})
	t.Logf("flood: %d connections made from 200 addresses, %d open now", dialed.Load(), held.Load())

	if out, stderr, code := proctest.Run(t, rlnodeBin, nil, "join", "--addr", n1.URL(), "--cluster-token-file", token,
		"--id", "n2", "--raft-addr", n2.RaftAddr, "--http-addr", n2.HTTPAddr); code != 0 {
		t.Fatalf("join n2 under the flood: exit %d\n%s%s", code, out, stderr)
	}
	proctest.WaitVoters(t, n1, 2, 30*time.Second)
	for i := range 5 {
		r, err := n2.Do("GET", fmt.Sprintf("/check/flooded-%d", i), "", nil)
		if err != nil || r.Status != 200 {
			t.Fatalf("check through the flooded node: %v %d %s", err, r.Status, r.Raw)
		}
	}
	// Heartbeats keep reaching it: it follows n1 in one term throughout.
	st0, err := proctest.Status(n2)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(4 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		st, err := proctest.Status(n2)
		if err != nil || st["leaderId"] != "n1" || st["term"] != st0["term"] {
			t.Fatalf("n2 under the flood: leader %v term %v (was %v), %v", st["leaderId"], st["term"], st0["term"], err)
		}
	}
	if fds := fdCount(t, n2.Pid()); fds > 900 {
		t.Errorf("n2 holds %d descriptors under the flood (limit 1024)", fds)
	} else {
		t.Logf("n2 holds %d descriptors under the flood (limit 1024); the flood made %d connections, %d open now", fds, dialed.Load(), held.Load())
	}
	if strings.Contains(n2.Output(), "too many open files") {
		t.Errorf("n2 ran out of descriptors")
	}
	stop()
}

// A cluster with neither token nor TLS (loopback only) admits a Raft
// connection the moment it is accepted, so no handshake budget applies:
// 200 loopback addresses holding 8 connections each, every one under its
// per-address cap, took a member's 1024 descriptors. Admitted connections
// from addresses that are not members' now have a total cap
// (--raft-max-conns): the member stays far from its limit, keeps following
// its leader in one term, and answers /check.
func TestRaftFloodWithoutTokenIsCapped(t *testing.T) {
	n1 := proctest.StartNode(t, rlnodeBin, "n1")
	proctest.WaitReady(t, n1, 15*time.Second)
	n2 := startLimitedNode(t, "n2", 1024, "--wait-for-join")
	proctest.Poll(t, 15*time.Second, func() error {
		_, err := net.DialTimeout("tcp", n2.RaftAddr, time.Second)
		return err
	})
	if out, stderr, code := proctest.Run(t, rlnodeBin, nil, "join", "--addr", n1.URL(),
		"--id", "n2", "--raft-addr", n2.RaftAddr, "--http-addr", n2.HTTPAddr); code != 0 {
		t.Fatalf("join n2: exit %d\n%s%s", code, out, stderr)
	}
	proctest.WaitVoters(t, n1, 2, 30*time.Second)
	time.Sleep(6 * time.Second) // n2 refreshes its members' addresses every five seconds

	stop, held, dialed := flood(t, n2.RaftAddr, 200, 8)
	proctest.Poll(t, 30*time.Second, func() error {
		if d := dialed.Load(); d < 1600 {
			return fmt.Errorf("%d flood connections made so far", d)
		}
		return nil
	})
	st0, err := proctest.Status(n2)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(4 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		st, err := proctest.Status(n2)
		if err != nil || st["leaderId"] != "n1" || st["term"] != st0["term"] {
			t.Fatalf("n2 under the flood: leader %v term %v (was %v), %v", st["leaderId"], st["term"], st0["term"], err)
		}
	}
	for i := range 5 {
		r, err := n2.Do("GET", fmt.Sprintf("/check/flooded-%d", i), "", nil)
		if err != nil || r.Status != 200 {
			t.Fatalf("check through the flooded node: %v %d %s", err, r.Status, r.Raw)
		}
	}
	fds := fdCount(t, n2.Pid())
	t.Logf("n2 holds %d descriptors under the flood (limit 1024); the flood made %d connections, %d open now", fds, dialed.Load(), held.Load())
	if fds > 900 {
		t.Errorf("n2 holds %d descriptors under the flood (limit 1024)", fds)
	}
	if strings.Contains(n2.Output(), "too many open files") {
		t.Errorf("n2 ran out of descriptors")
	}
	stop()
}
