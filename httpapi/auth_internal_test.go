package httpapi

import (
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
)

func TestParseKeySpec(t *testing.T) {
	for spec, want := range map[string]string{
		"header:x-api-key":    "header:X-Api-Key",
		"ip":                  "ip",
		"host+path":           "host path",
		"host path":           "host path", // '+' as a query string decodes it
		"header:X-Tenant,ip":  "header:X-Tenant ip",
		"method, host , path": "method host path",
	} {
		srcs, err := parseKeySpec(spec)
		if err != nil {
			t.Fatalf("%q: %v", spec, err)
		}
		got := ""
		for i, s := range srcs {
			if i > 0 {
				got += " "
			}
			got += s.String()
		}
		if got != want {
			t.Errorf("%q: %q, want %q", spec, got, want)
		}
	}
	for _, bad := range []string{"", " ", "cookie:a", "ip:x", "header:", "a,b,c,d,e,f,g,h,i"} {
		if _, err := parseKeySpec(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestForwardedClientIP(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	trusted, err := ParseTrustedProxies("127.0.0.1, 10.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseTrustedProxies("10.0.0.0/33"); err == nil {
		t.Fatal("bad CIDR accepted")
	}
	for _, c := range []struct {
		peer, xff, realIP, want string
	}{
		{"192.0.2.1:5000", "203.0.113.9", "", "192.0.2.1"},               // untrusted peer: its own address
		{"127.0.0.1:5000", "203.0.113.9", "", "203.0.113.9"},             // trusted proxy
		{"127.0.0.1:5000", "198.51.100.7, 10.1.2.3", "", "198.51.100.7"}, // two trusted hops
		{"127.0.0.1:5000", "6.6.6.6, 198.51.100.7", "", "198.51.100.7"},  // a spoofed left entry is not believed
		{"127.0.0.1:5000", "", "203.0.113.5", "203.0.113.5"},             // X-Real-IP from nginx
		{"127.0.0.1:5000", "", "", "127.0.0.1"},
		{"[::ffff:127.0.0.1]:5000", "203.0.113.9", "", "203.0.113.9"},
		{"127.0.0.1:5000", "10.0.0.1, 10.0.0.2", "", "10.0.0.1"}, // all trusted: the left-most
	} {
		gc, _ := gin.CreateTestContext(httptest.NewRecorder())
		gc.Request = httptest.NewRequest("GET", "/v1/auth/p", nil)
		gc.Request.RemoteAddr = c.peer
		if c.xff != "" {
			gc.Request.Header.Set("X-Forwarded-For", c.xff)
		}
		if c.realIP != "" {
			gc.Request.Header.Set("X-Real-IP", c.realIP)
		}
		if got := (authRequest{c: gc, trusted: trusted}).ip(); got != c.want {
			t.Errorf("peer %s xff %q real %q: %q, want %q", c.peer, c.xff, c.realIP, got, c.want)
		}
	}
}
