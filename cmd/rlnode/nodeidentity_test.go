package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
	"github.com/rlnode/rlnode/httpapi"
)

// certTLS is a client configuration trusting dir's CA and presenting
// dir/name.pem.
func certTLS(t *testing.T, dir, name string) *tls.Config {
	t.Helper()
	c := proctest.ClientTLS(t, dir, false)
	kp, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	c.Certificates = []tls.Certificate{kp}
	return c
}

// The attack of issue 17: on a mutual-TLS cluster without a token, the
// application certificate (client.pem) signed raft's own NetworkTransport
// in and a forged InstallSnapshot replaced every window while a forged
// TimeoutNow moved leadership. Now both are refused at the guard (state
// and term unchanged), as is a node certificate of a node that is not a
// member; the member's own node certificate gets through (control). The
// /internal/ endpoints and join refuse the client certificate too, while
// the public API and admin calls keep accepting it.
func TestClientCertRefusedOnNodePorts(t *testing.T) {
	dir := t.TempDir()
	proctest.TLSInit(t, rlnodeBin, dir, "n1", "n2")
	n1 := startTLSNode(t, dir, "n1")
	proctest.WaitReady(t, n1, 15*time.Second)
	if rem := spendOn(t, n1, "alice", 3); rem != 7 {
		t.Fatalf("remaining %d after 3 hits, want 7", rem)
	}
	term0, state0, windows0 := status(t, n1)

	for _, who := range []string{"client", "n2"} { // n2: a node certificate, but not a member
		a := newAttacker(t, tlsStream{cfg: certTLS(t, dir, who)})
		if err := a.installEmptySnapshot(t, n1, uint64(term0)+100); err == nil {
			t.Errorf("forged InstallSnapshot signed in with %s.pem accepted", who)
		}
		if err := a.timeoutNow(n1); err == nil {
			t.Errorf("forged TimeoutNow signed in with %s.pem accepted", who)
		}
	}
	time.Sleep(500 * time.Millisecond) // room for a wrongly accepted RPC to act
	if term, state, windows := status(t, n1); term != term0 || state != state0 || windows != windows0 {
		t.Fatalf("after forged RPCs: term %d state %s windows %d; before: term %d state %s windows %d", term, state, windows, term0, state0, windows0)
	}
	if rem := spendOn(t, n1, "alice", 1); rem != 6 {
		t.Fatalf("remaining %d after a 4th hit, want 6: the window did not survive", rem)
	}
	if !strings.Contains(n1.Output(), "not a node certificate") {
		t.Errorf("the node did not log the refusal")
	}
	// The non-member node certificate is said: status and the metric.
	if st, err := proctest.Status(n1); err != nil || !strings.Contains(fmt.Sprint(st["refusedPeer"]), "refused node n2") {
		t.Errorf("status after refusing n2: refusedPeer %v (%v)", st["refusedPeer"], err)
	}
	if m, err := n1.Do("GET", "/metrics", "", nil); err != nil || !strings.Contains(string(m.Raw), "rlnode_peer_refused 1") {
		t.Errorf("/metrics lacks rlnode_peer_refused 1 after refusing n2: %v", err)
	}
	// Control: the member's node certificate gets past the guard, and
	// raft obeys the TimeoutNow (a new election, a higher term).
	if err := newAttacker(t, tlsStream{cfg: certTLS(t, dir, "n1")}).timeoutNow(n1); err != nil {
		t.Fatalf("TimeoutNow with a member's node certificate: %v", err)
	}
	proctest.Poll(t, 10*time.Second, func() error {
		if term, _, _ := status(t, n1); term <= term0 {
			return fmt.Errorf("term still %d after a TimeoutNow with a node certificate", term)
		}
		return nil
	})

	t.Run("internal endpoints and join", func(t *testing.T) {
		clientHTTP := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: certTLS(t, dir, "client")}}
		nodeHTTP := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: certTLS(t, dir, "n1")}}
		for _, c := range []struct{ method, path string }{
			{"GET", cluster.ClockPath}, {"GET", cluster.ProgressPath}, {"POST", cluster.ForwardPath}, {"GET", cluster.BootstrapInfoPath},
			{"GET", cluster.ConfigurationPath}, {"GET", cluster.ConfigurationPath + "?verify"},
		} {
			r, err := proctest.DoRawWith(clientHTTP, c.method, n1.URL()+c.path, "", []byte{})
			if err != nil || r.Status != http.StatusForbidden || !strings.Contains(string(r.Raw), "not a node certificate") {
				t.Errorf("%s %s with client.pem: %v %d %s; want 403 naming the certificate", c.method, c.path, err, r.Status, r.Raw)
			}
		}
		if r, err := proctest.DoWith(nodeHTTP, "GET", n1.URL()+cluster.ClockPath, "", nil); err != nil || r.Status != 200 {
			t.Errorf("clock reading with n1's node certificate: %v %d %s", err, r.Status, r.Raw)
		}
		// The configuration is any node's to read (a node catching up
		// asks it of the members it trusts), and only a node's.
		n2HTTP := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: certTLS(t, dir, "n2")}}
		if r, err := proctest.DoWith(n2HTTP, "GET", n1.URL()+cluster.ConfigurationPath, "", nil); err != nil || r.Status != 200 || !strings.Contains(string(r.Raw), `"id":"n1"`) {
			t.Errorf("configuration with a non-member's node certificate: %v %d %s", err, r.Status, r.Raw)
		}
		j := cluster.JoinRequest{ID: "n9", RaftAddr: "127.0.0.1:1", HTTPAddr: "127.0.0.1:2"}
		for _, path := range []string{cluster.JoinPath, httpapi.JoinPath} {
			if r, err := proctest.DoWith(clientHTTP, "POST", n1.URL()+path, "", j); err != nil || r.Status != http.StatusForbidden {
				t.Errorf("join on %s with client.pem: %v %d %s; want 403", path, err, r.Status, r.Raw)
			}
		}
		// The public API and admin calls take the client certificate.
		if r, err := proctest.DoWith(clientHTTP, "PUT", n1.URL()+httpapi.PoliciesPath+"/api", "", map[string]any{"algorithm": "fixed_window", "limits": []map[string]any{{"limit": 5, "window": "1m"}}}); err != nil || r.Status != 200 {
			t.Errorf("policy set with client.pem: %v %d %s", err, r.Status, r.Raw)
		}
		if r, err := proctest.DoWith(clientHTTP, "GET", n1.URL()+"/check/bob", "", nil); err != nil || r.Status != 200 {
			t.Errorf("check with client.pem: %v %d %s", err, r.Status, r.Raw)
		}
	})
}

// A node whose certificate was written by the previous `tls init` (no node
// identity) refuses to start and says how to upgrade; with
// --tls-legacy-node-certs it starts and warns, and still refuses
// client.pem on the Raft port (it is not valid as a server certificate).
func TestLegacyNodeCertUpgradePath(t *testing.T) {
	dir := t.TempDir()
	proctest.TLSInit(t, rlnodeBin, dir, "n1")
	issueLegacyNodeCert(t, dir, "old1")
	_, stderr, code := proctest.Run(t, rlnodeBin, nil, append([]string{"serve", "--id", "old1", "--data-dir", t.TempDir(),
		"--http-addr", proctest.FreeAddr(t), "--raft-addr", proctest.FreeAddr(t)}, proctest.TLSFlags(dir, "old1")...)...)
	if code == 0 || !strings.Contains(stderr, "not a node certificate") || !strings.Contains(stderr, "rlnode tls init") || !strings.Contains(stderr, "--tls-legacy-node-certs") {
		t.Fatalf("node with a legacy certificate: exit %d, want a refusal naming the upgrade paths:\n%s", code, stderr)
	}
	n := startTLSNode(t, dir, "old1", "--tls-legacy-node-certs")
	proctest.WaitReady(t, n, 15*time.Second)
	if !strings.Contains(n.Output(), "--tls-legacy-node-certs: node certificates without a node identity are accepted") {
		t.Errorf("no loud warning about legacy node certificates:\n%s", n.Output())
	}
	term0, _, _ := status(t, n)
	if err := newAttacker(t, tlsStream{cfg: certTLS(t, dir, "client")}).timeoutNow(n); err == nil {
		t.Errorf("forged TimeoutNow with client.pem accepted in legacy mode")
	}
	if err := newAttacker(t, tlsStream{cfg: certTLS(t, dir, "old1")}).timeoutNow(n); err != nil {
		t.Errorf("TimeoutNow with the legacy node certificate in legacy mode: %v", err)
	}
	proctest.Poll(t, 10*time.Second, func() error {
		if term, _, _ := status(t, n); term <= term0 {
			return fmt.Errorf("term still %d", term)
		}
		return nil
	})
}

// issueLegacyNodeCert writes dir/name.pem as `tls init` did before node
// identities: CN=name, server and client auth, no URI SAN.
func issueLegacyNodeCert(t *testing.T, dir, name string) {
	t.Helper()
	read := func(f string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(b)
		return blk.Bytes
	}
	ca, err := x509.ParseCertificate(read("ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	caKey, err := x509.ParseECPrivateKey(read("ca-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name, Organization: []string{"rlnode"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{name, "localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	os.WriteFile(filepath.Join(dir, name+"-key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	os.WriteFile(filepath.Join(dir, name+".pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

// Each node presents its own certificate, chosen by its id (on
// Kubernetes: tls/$(POD_NAME).pem out of one Secret). A node whose file is
// missing (a pod added by scaling up, before its certificate is issued)
// refuses to start naming the file, its id and the command that issues
// it; one given another node's certificate names both ids. Neither
// listens.
func TestServeNamesAMissingOrForeignNodeCert(t *testing.T) {
	dir := t.TempDir()
	proctest.TLSInit(t, rlnodeBin, dir, "rlnode-0", "rlnode-1")
	serve := func(id, certOf string) (string, int) {
		_, stderr, code := proctest.Run(t, rlnodeBin, nil, append([]string{"serve", "--id", id,
			"--data-dir", filepath.Join(t.TempDir(), id), "--http-addr", proctest.FreeAddr(t), "--raft-addr", proctest.FreeAddr(t)},
			proctest.TLSFlags(dir, certOf)...)...)
		return stderr, code
	}
	stderr, code := serve("rlnode-2", "rlnode-2")
	for _, want := range []string{"refusing to start", filepath.Join(dir, "rlnode-2.pem") + " does not exist", `--id "rlnode-2"`,
		"rlnode tls init --out DIR --nodes ...,rlnode-2", "rlnode-2-key.pem", "docs/kubernetes.md"} {
		if code == 0 || !strings.Contains(stderr, want) {
			t.Errorf("serve --id rlnode-2 without its certificate: exit %d, stderr lacks %q:\n%s", code, want, stderr)
		}
	}
	stderr, code = serve("rlnode-1", "rlnode-0")
	if code == 0 || !strings.Contains(stderr, `is node "rlnode-0"'s certificate but --id is "rlnode-1"`) {
		t.Errorf("serve --id rlnode-1 with rlnode-0's certificate: exit %d\n%s", code, stderr)
	}
}
