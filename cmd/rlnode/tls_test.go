package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

func fileSerial(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: not PEM", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber.String()
}

// servedSerial is the serial of the certificate a port presents now.
func servedSerial(addr string, cfg *tls.Config) (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 3 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

func startTLSNode(t *testing.T, dir, id string, extra ...string) *proctest.Node {
	t.Helper()
	n := proctest.StartNode(t, rlnodeBin, id, append(proctest.TLSFlags(dir, id), extra...)...)
	n.TLS = proctest.ClientTLS(t, dir, true)
	return n
}

// A three-node cluster over mutual TLS keeps serving while every node's
// certificate is re-issued and reloaded (SIGHUP on two nodes, the file
// watcher on the third); clients, admin commands and Raft peers without a
// certificate are refused on every port.
func TestMutualTLSClusterRotation(t *testing.T) {
	proctest.Long(t)
	dir := t.TempDir()
	proctest.TLSInit(t, rlnodeBin, dir, "n1", "n2", "n3")
	n1 := startTLSNode(t, dir, "n1", "--tls-reload-interval", "0")
	proctest.WaitReady(t, n1, 15*time.Second)
	nodes := []*proctest.Node{n1,
		startTLSNode(t, dir, "n2", "--join", n1.URL(), "--tls-reload-interval", "0"),
		startTLSNode(t, dir, "n3", "--join", n1.URL(), "--tls-reload-interval", "200ms")}
	for _, n := range nodes {
		proctest.WaitReady(t, n, 20*time.Second)
	}

	// Traffic through every node for the whole rotation.
	var stop atomic.Bool
	var hits, failures atomic.Int64
	var firstErr sync.Once
	var errMsg atomic.Value
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; !stop.Load(); k++ {
				r, err := n.Do("GET", fmt.Sprintf("/check/c%d-%d", i, k%50), "", nil)
				hits.Add(1)
				if err != nil || (r.Status != 200 && r.Status != 429) {
					failures.Add(1)
					firstErr.Do(func() { errMsg.Store(fmt.Sprintf("%s: %v %d %s", n.ID, err, r.Status, r.Raw)) })
				}
			}
		}()
	}

	old := map[string]string{}
	for _, n := range nodes {
		old[n.ID] = fileSerial(t, filepath.Join(dir, n.ID+".pem"))
		if s, err := servedSerial(n.HTTPAddr, n.TLS); err != nil || s != old[n.ID] {
			t.Fatalf("%s serves serial %s (%v), want %s", n.ID, s, err, old[n.ID])
		}
	}
	time.Sleep(500 * time.Millisecond)
	proctest.TLSInit(t, rlnodeBin, dir, "n1", "n2", "n3") // same CA, new node certificates
	time.Sleep(300 * time.Millisecond)
	if s, _ := servedSerial(n1.HTTPAddr, n1.TLS); s != old["n1"] {
		t.Fatalf("n1 switched certificates before SIGHUP (reload interval 0)")
	}
	for _, n := range nodes[:2] {
		if err := syscallHUP(n); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		want := fileSerial(t, filepath.Join(dir, n.ID+".pem"))
		if want == old[n.ID] {
			t.Fatalf("tls init did not re-issue %s", n.ID)
		}
		for _, addr := range []string{n.HTTPAddr, n.RaftAddr} {
			proctest.Poll(t, 10*time.Second, func() error {
				s, err := servedSerial(addr, n.TLS)
				if err != nil || s != want {
					return fmt.Errorf("%s at %s serves serial %s (%v), want the new %s", n.ID, addr, s, err, want)
				}
				return nil
			})
		}
	}
	time.Sleep(time.Second) // traffic over new connections
	stop.Store(true)
	wg.Wait()
	if f := failures.Load(); f > 0 {
		t.Errorf("%d of %d hits failed during the rotation; first: %v", f, hits.Load(), errMsg.Load())
	}
	t.Logf("%d hits during the rotation, %d failed", hits.Load(), failures.Load())
	for _, n := range nodes {
		if !strings.Contains(n.Output(), "TLS certificates reloaded") {
			t.Errorf("%s logged no reload", n.ID)
		}
	}
	// Still one cluster after the rotation: a budget is shared by all nodes.
	for i := range 10 {
		if r, err := nodes[i%3].Do("GET", "/check/after", "", nil); err != nil || r.Status != 200 {
			t.Fatalf("hit %d after rotation: %v %d %s", i+1, err, r.Status, r.Raw)
		}
	}
	if r, _ := nodes[1].Do("GET", "/check/after", "", nil); r.Status != 429 {
		t.Fatalf("11th hit after rotation: %d %s, want 429", r.Status, r.Raw)
	}

	t.Run("refused without a certificate", func(t *testing.T) {
		noCert := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: proctest.ClientTLS(t, dir, false)}}
		if r, err := proctest.DoWith(noCert, "GET", n1.URL()+"/check/mallory", "", nil); err == nil {
			t.Errorf("check without a client certificate answered %d %s", r.Status, r.Raw)
		}
		if r, err := proctest.Get("http://" + n1.HTTPAddr + "/check/mallory"); err == nil && r.Status < 400 {
			t.Errorf("plain HTTP check answered %d", r.Status)
		}
		ca := filepath.Join(dir, "ca.pem")
		if _, stderr, code := proctest.Run(t, rlnodeBin, nil, "status", "--addr", n1.HTTPAddr, "--tls-ca", ca); code == 0 {
			t.Errorf("admin status without a client certificate succeeded")
		} else if !strings.Contains(stderr, "certificate") {
			t.Errorf("refusal does not say why: %s", stderr)
		}
		env := []string{"RLNODE_TLS_CERT=" + filepath.Join(dir, "client.pem"), "RLNODE_TLS_KEY=" + filepath.Join(dir, "client-key.pem"), "RLNODE_TLS_CA=" + ca}
		out, stderr, code := proctest.Run(t, rlnodeBin, env, "peers", "--addr", n1.HTTPAddr, "--json")
		if code != 0 || strings.Count(out, `"reachable": true`) != 3 {
			t.Errorf("admin peers with the client certificate from RLNODE_TLS_*: exit %d\n%s%s", code, out, stderr)
		}
		// bench takes the same TLS flags: with client.pem every request
		// is answered; without a certificate none is.
		for _, withCert := range []bool{true, false} {
			benv := []string{"RLNODE_TLS_CA=" + ca}
			if withCert {
				benv = env
			}
			out, stderr, _ := proctest.Run(t, rlnodeBin, benv, "bench", "--addr", n1.HTTPAddr, "--duration", "500ms", "--concurrency", "2", "--json")
			var res struct{ Requests, Errors int64 }
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatalf("bench output: %v\n%s%s", err, out, stderr)
			}
			if withCert && (res.Requests == 0 || res.Errors != 0) || !withCert && res.Errors != res.Requests {
				t.Errorf("bench (client certificate %v): %d requests, %d errors", withCert, res.Requests, res.Errors)
			}
		}
		// Raft: raft's own transport, plain and over TLS without a
		// client certificate, cannot move leadership.
		term0, _, windows0 := status(t, n1)
		for _, a := range []*attacker{newAttacker(t, nil), newAttacker(t, tlsStream{cfg: proctest.ClientTLS(t, dir, false)})} {
			if err := a.timeoutNow(n1); err == nil {
				t.Errorf("forged TimeoutNow accepted by a mutual-TLS Raft port")
			}
			if err := a.installEmptySnapshot(t, n1, uint64(term0)+100); err == nil {
				t.Errorf("forged InstallSnapshot accepted by a mutual-TLS Raft port")
			}
		}
		time.Sleep(300 * time.Millisecond)
		if term, _, windows := status(t, n1); term != term0 || windows != windows0 || windows == 0 {
			t.Errorf("after forged RPCs: term %d, %d windows; before: term %d, %d windows", term, windows, term0, windows0)
		}
	})
}

// tlsStream dials Raft over TLS with cfg (trusting the CA, presenting
// cfg's certificate if any); it accepts nothing.
type tlsStream struct{ cfg *tls.Config }

func (s tlsStream) Accept() (net.Conn, error) { select {} }
func (s tlsStream) Close() error              { return nil }
func (s tlsStream) Addr() net.Addr            { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }
func (s tlsStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", string(addr), s.cfg)
}

func syscallHUP(n *proctest.Node) error {
	p, err := os.FindProcess(n.Pid())
	if err != nil {
		return err
	}
	return p.Signal(syscall.SIGHUP)
}
