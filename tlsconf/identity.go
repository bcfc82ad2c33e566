package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// Node identity. A node certificate names its node in a URI SAN,
// spiffe://rlnode/node/<name>, which `tls init` writes into node
// certificates only (never into client.pem). Node-to-node ports (Raft,
// /internal/, join) accept a certificate only when it carries one.
//
// Why a URI SAN rather than a separate CA or a hostname: the CA chain alone
// cannot tell a node from an application (both are signed by it; that is
// the hole this closes), and a second CA doubles what operators manage.
// Consul solves the same problem with a name check (server certificates
// must be valid for server.<dc>.<domain>), but it spends a DNS name on it;
// rqlite keeps separate node certificate flags. A URI SAN is a standard
// identity field (SPIFFE X.509-SVID) that private CAs (cert-manager, Vault,
// step-ca) add with one line, is never confused with the host names DNS
// SANs carry for hostname checks, and names the node, so a member list can
// be checked against it.
const nodeURIPrefix = "spiffe://rlnode/node/"

// NodeURI is the URI SAN that marks a certificate as node name's.
func NodeURI(name string) *url.URL {
	u, _ := url.Parse(nodeURIPrefix + url.PathEscape(name))
	return u
}

// NodeName returns the node name a certificate's URI SAN carries, or ""
// when it carries none (an application or admin certificate).
func NodeName(c *x509.Certificate) string {
	for _, u := range c.URIs {
		if s := u.String(); strings.HasPrefix(s, nodeURIPrefix) {
			if name, err := url.PathUnescape(strings.TrimPrefix(s, nodeURIPrefix)); err == nil && name != "" {
				return name
			}
		}
	}
	return ""
}

// legacyNodeName is the name of a node certificate written by `tls init`
// before node identities: its common name, when it is valid as a server
// (client.pem never was). Accepted only when the operator opts in.
func legacyNodeName(c *x509.Certificate) string {
	if c.Subject.CommonName == "" || c.Subject.CommonName == ClientName || !slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
		return ""
	}
	return c.Subject.CommonName
}

// ErrNotNode is returned for a peer whose certificate is not a node's.
var ErrNotNode = errors.New("the certificate is not a node certificate (it has no URI SAN " + nodeURIPrefix + "<id>; application and admin certificates such as client.pem are refused on node-to-node ports)")

// AcceptLegacyNodeCerts makes PeerNode and OwnNode also accept node
// certificates without the URI SAN, named by their common name, as long
// as they are valid as servers: the upgrade path for certificates written
// by an older `tls init`. It weakens the check (any server certificate the
// CA signed then passes as a node), so serve warns loudly.
func (s *Source) AcceptLegacyNodeCerts() { s.legacy.Store(true) }

// LegacyNodeCerts reports whether AcceptLegacyNodeCerts was called.
func (s *Source) LegacyNodeCerts() bool { return s.legacy.Load() }

func (s *Source) nodeName(c *x509.Certificate) (name string, legacy bool) {
	if name := NodeName(c); name != "" {
		return name, false
	}
	if s.legacy.Load() {
		if name := legacyNodeName(c); name != "" {
			return name, true
		}
	}
	return "", false
}

// PeerNode returns the node name of the verified certificate a peer
// presented on cs, or ErrNotNode. legacy reports a certificate accepted
// only by AcceptLegacyNodeCerts.
func (s *Source) PeerNode(cs *tls.ConnectionState) (name string, legacy bool, err error) {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.PeerCertificates) == 0 {
		return "", false, errors.New("no verified client certificate: node-to-node ports need a node certificate")
	}
	leaf := cs.PeerCertificates[0]
	name, legacy = s.nodeName(leaf)
	if name == "" {
		return "", false, fmt.Errorf("certificate %q: %w", leaf.Subject.CommonName, ErrNotNode)
	}
	return name, legacy, nil
}

// OwnNode returns the node name this party's own certificate carries, or
// an error saying how to get one.
func (s *Source) OwnNode() (string, error) {
	s.mu.RLock()
	cert := s.cert
	s.mu.RUnlock()
	if cert == nil {
		return "", errors.New("no certificate")
	}
	leaf, err := leafOf(cert)
	if err != nil {
		return "", err
	}
	name, _ := s.nodeName(leaf)
	if name == "" {
		return "", fmt.Errorf("%s (CN %q) is not a node certificate: it has no URI SAN %s<id>", s.files.Cert, leaf.Subject.CommonName, nodeURIPrefix)
	}
	return name, nil
}

func leafOf(c *tls.Certificate) (*x509.Certificate, error) {
	if c.Leaf != nil {
		return c.Leaf, nil
	}
	if len(c.Certificate) == 0 {
		return nil, errors.New("empty certificate")
	}
	return x509.ParseCertificate(c.Certificate[0])
}
