package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func files(dir, name string) Files {
	return Files{Cert: filepath.Join(dir, CertFile(name)), Key: filepath.Join(dir, KeyFile(name)), CA: filepath.Join(dir, CAFile)}
}

// handshake runs a mutual-TLS handshake over real TCP between a server
// using srv and a client using cli, and returns the server certificate's
// serial as the client saw it.
func handshake(t *testing.T, srv, cli *Source, serverName string) (string, error) {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", srv.ServerConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err == nil {
			c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	raw, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := tls.Client(raw, cli.ClientConfig(serverName))
	defer c.Close()
	if err := c.Handshake(); err != nil {
		return "", err
	}
	// The server may still reject our certificate after the client's side
	// is done (TLS 1.3): read to see the alert.
	if _, err := c.Read(make([]byte, 1)); err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

func TestInitLoadHandshakeAndReload(t *testing.T) {
	dir := t.TempDir()
	if _, err := Init(InitOptions{Dir: dir, Nodes: []string{"n1", "n2"}, Hosts: []string{"10.0.0.5"}}); err != nil {
		t.Fatal(err)
	}
	caBefore, _ := os.ReadFile(filepath.Join(dir, CAFile))
	n1, err := Load(files(dir, "n1"))
	if err != nil {
		t.Fatal(err)
	}
	n2, err := Load(files(dir, "n2"))
	if err != nil {
		t.Fatal(err)
	}
	if !n1.Mutual() || !n1.HasCert() {
		t.Fatal("node source: want mutual and a certificate")
	}
	for _, name := range []string{"n1", "localhost", "127.0.0.1", "10.0.0.5"} {
		if _, err := handshake(t, n1, n2, name); err != nil {
			t.Errorf("n2 -> n1 as %q: %v", name, err)
		}
	}
	if _, err := handshake(t, n1, n2, "n9"); err == nil {
		t.Error("a name not in the certificate was accepted")
	}
	noCert, err := Load(Files{CA: filepath.Join(dir, CAFile)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := handshake(t, n1, noCert, "n1"); err == nil {
		t.Error("a client without a certificate got through mutual TLS")
	}

	old, _ := handshake(t, n1, n2, "n1")
	// A broken file is refused and the old certificate stays in use.
	os.WriteFile(files(dir, "n1").Cert, []byte("garbage"), 0o644)
	if _, err := n1.Reload(); err == nil {
		t.Fatal("reload of a garbage certificate succeeded")
	}
	if s, err := handshake(t, n1, n2, "n1"); err != nil || s != old {
		t.Fatalf("after a failed reload: serial %s (%v), want the old %s", s, err, old)
	}
	// Re-issuing keeps the CA; a reload switches to the new certificate.
	if _, err := Init(InitOptions{Dir: dir, Nodes: []string{"n1"}}); err != nil {
		t.Fatal(err)
	}
	if caAfter, _ := os.ReadFile(filepath.Join(dir, CAFile)); string(caAfter) != string(caBefore) {
		t.Fatal("a second init replaced the CA")
	}
	if changed, err := n1.Reload(); err != nil || !changed {
		t.Fatalf("reload after re-issue: changed %v, %v", changed, err)
	}
	if changed, _ := n1.Reload(); changed {
		t.Fatal("reload of unchanged files reported a change")
	}
	if s, err := handshake(t, n1, n2, "n1"); err != nil || s == old {
		t.Fatalf("after reload: serial %s (%v), want a new one (old %s)", s, err, old)
	}
}

func TestValidateAndBadInput(t *testing.T) {
	if err := (Files{Cert: "a"}).Validate(false); err == nil {
		t.Error("cert without key accepted")
	}
	if err := (Files{CA: "a"}).Validate(true); err == nil {
		t.Error("server with a CA but no certificate accepted")
	}
	if _, err := Load(Files{Cert: "/nonexistent.pem", Key: "/nonexistent-key.pem"}); err == nil {
		t.Error("missing files loaded")
	}
	for _, bad := range []string{"", "client", "ca", "../x", ".hidden"} {
		if _, err := Init(InitOptions{Dir: t.TempDir(), Nodes: []string{bad}}); err == nil {
			t.Errorf("node name %q accepted", bad)
		}
	}
}

// Node certificates from Init name their node; client.pem names none. A
// reload that would replace a node's certificate with one its check
// refuses keeps the previous certificate.
func TestInitNodeIdentity(t *testing.T) {
	dir := t.TempDir()
	if _, err := Init(InitOptions{Dir: dir, Nodes: []string{"n1", "n2"}}); err != nil {
		t.Fatal(err)
	}
	n1, err := Load(files(dir, "n1"))
	if err != nil {
		t.Fatal(err)
	}
	if name, err := n1.OwnNode(); err != nil || name != "n1" {
		t.Fatalf("n1's own node name: %q %v", name, err)
	}
	cli, err := Load(Files{Cert: filepath.Join(dir, CertFile(ClientName)), Key: filepath.Join(dir, KeyFile(ClientName)), CA: filepath.Join(dir, CAFile)})
	if err != nil {
		t.Fatal(err)
	}
	if name, err := cli.OwnNode(); err == nil {
		t.Fatalf("client.pem names node %q", name)
	}
	cli.AcceptLegacyNodeCerts()
	if name, err := cli.OwnNode(); err == nil {
		t.Fatalf("client.pem passes as legacy node %q", name)
	}

	n1.SetCertCheck(func(leaf *x509.Certificate) error {
		if NodeName(leaf) != "n1" {
			return errors.New("not n1")
		}
		return nil
	})
	for _, f := range []string{CertFile("n1"), KeyFile("n1")} { // n1's files now hold n2's certificate
		b, err := os.ReadFile(filepath.Join(dir, strings.Replace(f, "n1", "n2", 1)))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n1.Reload(); err == nil || !strings.Contains(err.Error(), "not n1") {
		t.Fatalf("reload of another node's certificate: %v, want refused", err)
	}
	if name, _ := n1.OwnNode(); name != "n1" {
		t.Fatalf("after a refused reload the node is %q", name)
	}
}
