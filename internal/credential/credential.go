// Package credential names who a request comes from, one way for every
// port: the client certificate's fingerprint under mutual TLS, else the
// bearer token's, else the source address. Budgets per credential (the
// stream budgets of the gRPC ports, the permits, reservations and leases
// a caller may hold) and the owner bound to a permit, a reservation or a
// lease holder all read this name, so a caller is the same credential on
// HTTP and gRPC.
//
// The spellings are persisted: a permit's or a reservation's owner and an
// external lease holder's id are written into log entries and snapshots
// with them, and a release, settle or return matches them exactly. So
// they never change; "cert-" and "token-" are the ones round 4 wrote.
package credential

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"net"
	"net/netip"
	"strings"
)

// Prefixes of the three kinds.
const (
	certPrefix  = "cert-"
	tokenPrefix = "token-"
	addrPrefix  = "addr-"
)

// Cert names a client certificate (its DER bytes): the first 8 bytes of
// its SHA-256, in hex.
func Cert(der []byte) string { return certPrefix + fingerprint(der) }

// Token names a bearer token the same way; the token itself never
// appears.
func Token(tok string) string { return tokenPrefix + fingerprint([]byte(tok)) }

// Addr names an unauthenticated caller by its source IP address (the
// port is dropped: one host's connections are one credential). An IPv4
// address in IPv6 form is named as IPv4.
func Addr(remote string) string {
	host := remote
	if h, _, err := net.SplitHostPort(remote); err == nil {
		host = h
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return addrPrefix + a.Unmap().String()
	}
	if host == "" {
		return addrPrefix + "unknown"
	}
	return addrPrefix + host
}

// IsAddr says whether name is an unauthenticated caller's.
func IsAddr(name string) bool { return strings.HasPrefix(name, addrPrefix) }

// OfTLS names the client certificate of a TLS connection, if it had one.
func OfTLS(state *tls.ConnectionState) (string, bool) {
	if state == nil || len(state.PeerCertificates) == 0 {
		return "", false
	}
	return Cert(state.PeerCertificates[0].Raw), true
}

// Of names a request's credential: its client certificate, else its
// bearer token (the Authorization header's value after "Bearer "), else
// its source address.
func Of(state *tls.ConnectionState, authorization, remote string) string {
	if name, ok := OfTLS(state); ok {
		return name
	}
	if tok, ok := strings.CutPrefix(authorization, "Bearer "); ok && tok != "" {
		return Token(tok)
	}
	return Addr(remote)
}

func fingerprint(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}
