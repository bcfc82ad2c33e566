package tlsconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rlnode/rlnode/internal/boundedfile"
)

// File names Init writes into its directory.
const (
	CAFile     = "ca.pem"
	CAKeyFile  = "ca-key.pem"
	ClientName = "client"
)

// CertFile and KeyFile name the files of one node (or of "client").
func CertFile(name string) string { return name + ".pem" }
func KeyFile(name string) string  { return name + "-key.pem" }

// InitOptions says what Init issues.
type InitOptions struct {
	Dir   string
	Nodes []string
	// Hosts are extra names or IPs every node certificate is valid for
	// (besides the node's own name, localhost, 127.0.0.1 and ::1).
	Hosts []string
	// Valid is how long the node and client certificates last.
	Valid time.Duration
}

// Init writes a CA (or reuses the one already in Dir, so running it again
// re-issues node certificates under the same CA, e.g. to rotate them), one
// certificate per node valid as server and client and carrying the node's
// identity (NodeURI), and a client-only certificate for the admin CLI and
// applications, which carries none. It returns the files
// written.
func Init(o InitOptions) ([]string, error) {
	if len(o.Nodes) == 0 {
		return nil, errors.New("no node names given")
	}
	for _, n := range o.Nodes {
		if n == "" || n == ClientName || strings.ContainsAny(n, `/\`) || strings.HasPrefix(n, ".") || n == "ca" {
			return nil, fmt.Errorf("node name %q: want a plain name other than %q and %q", n, ClientName, "ca")
		}
	}
	if o.Valid <= 0 {
		o.Valid = 365 * 24 * time.Hour
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", o.Dir, err)
	}
	ca, caKey, written, err := loadOrCreateCA(o.Dir)
	if err != nil {
		return nil, err
	}
	for _, n := range append(append([]string(nil), o.Nodes...), ClientName) {
		files, err := issue(o, n, ca, caKey)
		if err != nil {
			return written, fmt.Errorf("issue %s: %w", n, err)
		}
		written = append(written, files...)
	}
	return written, nil
}

func loadOrCreateCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, []string, error) {
	certPath, keyPath := filepath.Join(dir, CAFile), filepath.Join(dir, CAKeyFile)
	certPEM, err1 := boundedfile.Read(certPath, MaxFileBytes)
	keyPEM, err2 := boundedfile.Read(keyPath, MaxFileBytes)
	if err1 == nil && err2 == nil {
		cert, key, err := parseCA(certPEM, keyPEM)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("existing CA in %s: %w", dir, err)
		}
		return cert, key, nil, nil
	}
	if !errors.Is(err1, os.ErrNotExist) || !errors.Is(err2, os.ErrNotExist) {
		return nil, nil, nil, fmt.Errorf("%s and %s: need both or neither (%v; %v)", certPath, keyPath, err1, err2)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "rlnode CA", Organization: []string{"rlnode"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, err
	}
	cert, _ := x509.ParseCertificate(der)
	if err := writePEM(certPath, "CERTIFICATE", der, 0o644); err != nil {
		return nil, nil, nil, err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := writePEM(keyPath, "EC PRIVATE KEY", kb, 0o600); err != nil {
		return nil, nil, nil, err
	}
	return cert, key, []string{certPath, keyPath}, nil
}

func parseCA(certPEM, keyPEM []byte) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, errors.New("not PEM")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("CA key (want the EC key rlnode tls init writes): %w", err)
	}
	if !cert.IsCA || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, nil, errors.New("the certificate is not a CA or does not match the key")
	}
	return cert, key, nil
}

func issue(o InitOptions, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey) ([]string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"rlnode"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(o.Valid),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if name != ClientName {
		// Only node certificates carry a node identity: node-to-node
		// ports refuse client.pem (see identity.go).
		tmpl.URIs = []*url.URL{NodeURI(name)}
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		for _, h := range append([]string{name, "localhost", "127.0.0.1", "::1"}, o.Hosts...) {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else if h != "" {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	certPath, keyPath := filepath.Join(o.Dir, CertFile(name)), filepath.Join(o.Dir, KeyFile(name))
	// Key first, then certificate: a node watching the files sees a
	// mismatched pair for a moment at most, and keeps its old one until
	// both are written.
	if err := writePEM(keyPath, "EC PRIVATE KEY", kb, 0o600); err != nil {
		return nil, err
	}
	if err := writePEM(certPath, "CERTIFICATE", der, 0o644); err != nil {
		return nil, err
	}
	return []string{certPath, keyPath}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

// writePEM writes atomically (temp file and rename), so a reader never sees
// half a file.
func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := pem.Encode(tmp, &pem.Block{Type: typ, Bytes: der}); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
