package credential

import (
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"
)

// The persisted spellings: owners and holder ids written by round 4
// ("cert-" and "token-" with 16 hex digits) must still match.
func TestSpellingsArePersistedOnes(t *testing.T) {
	if got := Token("s3cret"); got != "token-"+fingerprint([]byte("s3cret")) || len(got) != len("token-")+16 {
		t.Fatalf("Token: %q", got)
	}
	st := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{Raw: []byte("der")}}}
	if got, ok := OfTLS(st); !ok || got != "cert-"+fingerprint([]byte("der")) {
		t.Fatalf("OfTLS: %q %v", got, ok)
	}
	if got := Of(st, "Bearer x", "1.2.3.4:5"); !strings.HasPrefix(got, "cert-") {
		t.Fatalf("a certificate comes first: %q", got)
	}
	if got := Of(nil, "Bearer x", "1.2.3.4:5"); got != Token("x") {
		t.Fatalf("then the token: %q", got)
	}
	for remote, want := range map[string]string{
		"1.2.3.4:5":          "addr-1.2.3.4",
		"[::ffff:1.2.3.4]:5": "addr-1.2.3.4",
		"[::1]:80":           "addr-::1",
		"":                   "addr-unknown",
	} {
		if got := Of(nil, "", remote); got != want || !IsAddr(got) {
			t.Errorf("Of(%q): %q, want %q", remote, got, want)
		}
	}
}
