package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// security is how the run's nodes prove membership to each other, as a
// production cluster would: mutual TLS with certificates from `rlnode tls
// init` and a cluster token read from a file; the runner's clients present
// the client certificate and the admin calls the token.
type security struct {
	token     string
	tokenFile string
	tlsDir    string      // "" with --insecure
	client    *tls.Config // nil with --insecure
}

// setupSecurity writes the token and certificates under out/secrets and
// gives every spec its TLS flags and https URL. With insecure nothing is
// set up and the nodes run --insecure.
func setupSecurity(ctx context.Context, bin, out string, specs []nodeSpec, insecure bool) (*security, []string, error) {
	if insecure {
		return &security{}, []string{"--insecure"}, nil
	}
	dir := filepath.Join(out, "secrets")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("create %s: %w", dir, err)
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, nil, err
	}
	s := &security{token: hex.EncodeToString(b), tokenFile: filepath.Join(dir, "cluster-token"), tlsDir: filepath.Join(dir, "tls")}
	if err := os.WriteFile(s.tokenFile, []byte(s.token+"\n"), 0o600); err != nil {
		return nil, nil, fmt.Errorf("write token: %w", err)
	}
	var ids, hosts []string
	for _, sp := range specs {
		ids = append(ids, sp.id)
		if h, _, err := net.SplitHostPort(sp.httpAddr); err == nil {
			hosts = append(hosts, h)
		}
	}
	cmd := exec.CommandContext(ctx, bin, "tls", "init", "--out", s.tlsDir, "--nodes", strings.Join(ids, ","), "--hosts", strings.Join(hosts, ","))
	if outb, err := cmd.CombinedOutput(); err != nil {
		return nil, nil, fmt.Errorf("rlnode tls init: %w\n%s", err, outb)
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(s.tlsDir, "client.pem"), filepath.Join(s.tlsDir, "client-key.pem"))
	if err != nil {
		return nil, nil, fmt.Errorf("load client certificate: %w", err)
	}
	pool, err := loadPool(filepath.Join(s.tlsDir, "ca.pem"))
	if err != nil {
		return nil, nil, err
	}
	s.client = &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}
	for i := range specs {
		id := specs[i].id
		specs[i].scheme = "https"
		specs[i].extra = []string{"--tls-cert", filepath.Join(s.tlsDir, id+".pem"), "--tls-key", filepath.Join(s.tlsDir, id+"-key.pem"),
			"--tls-ca", filepath.Join(s.tlsDir, "ca.pem")}
	}
	return s, []string{"--cluster-token-file", s.tokenFile}, nil
}

func (s *security) describe() string {
	if s.client == nil {
		return "none (--insecure)"
	}
	return "mutual TLS (rlnode tls init) and a cluster token file on every port"
}

func loadPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s: no certificate", path)
	}
	return pool, nil
}
