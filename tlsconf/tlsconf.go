// Package tlsconf builds the TLS configurations of every rlnode listener and
// client (HTTP API, Raft stream layer, gRPC, admin CLI) from one set of PEM
// files, and reloads them when the files change or on request (SIGHUP)
// without touching connections already open.
//
// A Source holds the current certificate and CA pool. Servers take
// ServerConfig (its GetConfigForClient reads the current state on every
// handshake); clients take ClientConfig or DialTLS per connection. With a CA,
// servers require and verify client certificates signed by it (mutual TLS).
package tlsconf

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlnode/rlnode/internal/boundedfile"
)

// Environment variables the flags default to.
const (
	EnvCert = "RLNODE_TLS_CERT"
	EnvKey  = "RLNODE_TLS_KEY"
	EnvCA   = "RLNODE_TLS_CA"
)

// Files names the PEM files: this party's certificate chain and key, and the
// CA bundle that peers' certificates must chain to.
type Files struct {
	Cert, Key, CA string
}

// FilesFromEnv reads RLNODE_TLS_CERT, RLNODE_TLS_KEY and RLNODE_TLS_CA.
func FilesFromEnv() Files {
	return Files{Cert: os.Getenv(EnvCert), Key: os.Getenv(EnvKey), CA: os.Getenv(EnvCA)}
}

// Enabled reports whether any TLS file is given.
func (f Files) Enabled() bool { return f.Cert != "" || f.Key != "" || f.CA != "" }

// Validate checks the combination for a server (needCert) or a client.
func (f Files) Validate(needCert bool) error {
	switch {
	case (f.Cert == "") != (f.Key == ""):
		return errors.New("--tls-cert and --tls-key go together: give both or neither")
	case needCert && f.Cert == "" && f.CA != "":
		return errors.New("--tls-ca without --tls-cert/--tls-key: a node needs its own certificate to serve TLS")
	}
	return nil
}

// Source is the current TLS material, safe for concurrent use.
type Source struct {
	files Files

	mu     sync.RWMutex
	cert   *tls.Certificate // nil for a client without a certificate
	pool   *x509.CertPool   // nil: no CA given (system roots for clients, no client auth for servers)
	server *tls.Config      // built from cert and pool at each load
	sum    [32]byte         // of the files' contents, to skip reloading unchanged files
	// check, when set, must accept a reloaded certificate before it
	// replaces the current one (SetCertCheck).
	check  func(leaf *x509.Certificate) error
	legacy atomic.Bool // AcceptLegacyNodeCerts
}

// SetCertCheck makes every later reload refuse (and keep the previous
// material) a certificate check rejects, e.g. a node certificate re-issued
// without its node identity.
func (s *Source) SetCertCheck(check func(leaf *x509.Certificate) error) {
	s.mu.Lock()
	s.check = check
	s.mu.Unlock()
}

// Load reads the files once. It fails if they are missing, unparsable or the
// key does not match the certificate.
func Load(f Files) (*Source, error) {
	if err := f.Validate(false); err != nil {
		return nil, err
	}
	s := &Source{files: f}
	if _, err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Files returns the file names the source reads.
func (s *Source) Files() Files { return s.files }

// Mutual reports whether a CA is configured, i.e. servers require client
// certificates signed by it.
func (s *Source) Mutual() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.pool != nil
}

// HasCert reports whether this party has its own certificate.
func (s *Source) HasCert() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cert != nil
}

// MaxFileBytes is the largest certificate, key or CA bundle file read: a
// bundle of a few hundred certificates fits.
const MaxFileBytes = 1 << 20

// Reload re-reads the files. If they are unchanged it does nothing and
// returns false; if they are broken (e.g. half written) it keeps the previous
// material and returns the error.
func (s *Source) Reload() (changed bool, err error) {
	var raw [3][]byte
	for i, name := range []string{s.files.Cert, s.files.Key, s.files.CA} {
		if name == "" {
			continue
		}
		if raw[i], err = boundedfile.Read(name, MaxFileBytes); err != nil {
			return false, fmt.Errorf("read TLS file: %w", err)
		}
	}
	h := sha256.New()
	for _, b := range raw {
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	s.mu.RLock()
	same := s.sum == sum && s.server != nil
	s.mu.RUnlock()
	if same {
		return false, nil
	}

	var cert *tls.Certificate
	if s.files.Cert != "" {
		c, err := tls.X509KeyPair(raw[0], raw[1])
		if err != nil {
			return false, fmt.Errorf("TLS key pair %s, %s: %w", s.files.Cert, s.files.Key, err)
		}
		cert = &c
		s.mu.RLock()
		check := s.check
		s.mu.RUnlock()
		if check != nil {
			leaf, err := leafOf(cert)
			if err == nil {
				err = check(leaf)
			}
			if err != nil {
				return false, fmt.Errorf("TLS certificate %s: %w", s.files.Cert, err)
			}
		}
	}
	var pool *x509.CertPool
	if s.files.CA != "" {
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(raw[2]) {
			return false, fmt.Errorf("TLS CA %s: no PEM certificate in it", s.files.CA)
		}
	}
	server := &tls.Config{MinVersion: tls.VersionTLS12}
	if cert != nil {
		server.Certificates = []tls.Certificate{*cert}
	}
	if pool != nil {
		server.ClientCAs = pool
		server.ClientAuth = tls.RequireAndVerifyClientCert
	}
	s.mu.Lock()
	s.cert, s.pool, s.server, s.sum = cert, pool, server, sum
	s.mu.Unlock()
	return true, nil
}

// ServerConfig returns a config for a listener. Every handshake uses the
// material current at that moment, so a reload applies to new connections
// while open ones keep going. nextProtos are the ALPN protocols to offer
// (e.g. "h2" for gRPC); none for HTTP/1.1 and Raft.
func (s *Source) ServerConfig(nextProtos ...string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			s.mu.RLock()
			c := s.server
			s.mu.RUnlock()
			if c.Certificates == nil {
				return nil, errors.New("this node has no TLS certificate")
			}
			if len(nextProtos) > 0 {
				c = c.Clone()
				c.NextProtos = nextProtos
			}
			return c, nil
		},
	}
}

// ClientConfig returns a config for one connection to serverName (a host
// name or IP, checked against the server certificate), presenting this
// party's certificate if it has one.
func (s *Source) ClientConfig(serverName string) *tls.Config {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName, RootCAs: s.pool}
	if s.cert != nil {
		c.Certificates = []tls.Certificate{*s.cert}
	}
	return c
}

// DialTLS dials addr and completes a TLS handshake with the current
// material; it fits http.Transport.DialTLSContext.
func (s *Source) DialTLS(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}, Config: s.ClientConfig(host)}
	return d.DialContext(ctx, network, addr)
}
