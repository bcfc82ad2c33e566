package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/rlnode/rlnode/internal/boundedfile"
)

// The environment variables rlnode's own commands read for TLS.
const (
	EnvTLSCert = "RLNODE_TLS_CERT"
	EnvTLSKey  = "RLNODE_TLS_KEY"
	EnvTLSCA   = "RLNODE_TLS_CA"
)

// TLSFromFiles builds a TLS configuration for Config.TLS: caFile is the CA
// bundle the nodes' certificates chain to (empty: the system roots);
// certFile and keyFile, when given, are the client certificate a cluster
// with mutual TLS asks for (rlnode tls init writes client.pem and
// client-key.pem).
func TLSFromFiles(certFile, keyFile, caFile string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("rlnode client: a TLS certificate and its key go together: give both or neither")
	}
	if certFile != "" {
		kp, err := loadKeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("rlnode client: load TLS certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{kp}
	}
	if caFile != "" {
		b, err := boundedfile.Read(caFile, MaxTLSFileBytes)
		if err != nil {
			return nil, fmt.Errorf("rlnode client: read TLS CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("rlnode client: %s holds no PEM certificate", caFile)
		}
		c.RootCAs = pool
	}
	return c, nil
}

// MaxTLSFileBytes is the largest certificate, key or CA bundle file the
// client reads, as rlnode's own commands (docs/security.md, "Files rlnode
// reads"): a FIFO, a device or a huge file named by mistake is refused
// with its name instead of hanging or exhausting memory.
const MaxTLSFileBytes = 1 << 20

// loadKeyPair is tls.LoadX509KeyPair with each file read bounded.
func loadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	cert, err := boundedfile.Read(certFile, MaxTLSFileBytes)
	if err != nil {
		return tls.Certificate{}, err
	}
	key, err := boundedfile.Read(keyFile, MaxTLSFileBytes)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(cert, key)
}

// TLSFromEnv is TLSFromFiles with $RLNODE_TLS_CERT, $RLNODE_TLS_KEY and
// $RLNODE_TLS_CA, the variables rlnode's commands read; nil (plain HTTP)
// when none is set.
func TLSFromEnv() (*tls.Config, error) {
	cert, key, ca := os.Getenv(EnvTLSCert), os.Getenv(EnvTLSKey), os.Getenv(EnvTLSCA)
	if cert == "" && key == "" && ca == "" {
		return nil, nil
	}
	return TLSFromFiles(cert, key, ca)
}
