package httpapi

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/policy"
	"github.com/rlnode/rlnode/window"
)

// Forward-auth: a reverse proxy (Caddy forward_auth, Traefik ForwardAuth,
// nginx auth_request, Envoy ext_authz) asks /v1/auth/:policy before passing
// a request upstream; rlnode counts one hit for a key taken from that
// request and answers 2xx (let it through, with rate-limit headers to copy
// upstream) or 429 with Retry-After.

// AuthPath is the forward-auth endpoint's prefix.
const AuthPath = "/v1/auth/"

// Headers a proxy may set instead of query parameters (Envoy's ext_authz
// appends the original path to the endpoint, so it cannot pass a query).
// They are read only when the query does not say, and the proxy must set
// them itself (Envoy: headers_to_add), overriding anything a client sent.
const (
	HeaderAuthKey  = "X-Rlnode-Key"
	HeaderAuthCost = "X-Rlnode-Cost"
)

// keySource is one part of a forward-auth key.
type keySource struct {
	kind string // header, ip, host, path, method
	name string // the header, for kind header
}

func (s keySource) String() string {
	if s.kind == "header" {
		return "header:" + s.name
	}
	return s.kind
}

// parseKeySpec reads "header:X-Api-Key", "ip", "host+path" or
// "header:X-Tenant,ip": sources joined by ',' or '+' (a '+' in a query
// string arrives as a space, which is accepted too).
func parseKeySpec(spec string) ([]keySource, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, errors.New(`key is empty: want e.g. key=header:X-Api-Key, key=ip, key=host+path or key=header:X-Tenant,ip`)
	}
	var out []keySource
	for _, part := range strings.FieldsFunc(spec, func(r rune) bool { return r == ',' || r == '+' || r == ' ' }) {
		kind, name, _ := strings.Cut(part, ":")
		switch kind = strings.ToLower(kind); kind {
		case "header":
			if name == "" || strings.ContainsAny(name, " \t") {
				return nil, fmt.Errorf("key source %q: want header:NAME", part)
			}
			out = append(out, keySource{kind: kind, name: http.CanonicalHeaderKey(name)})
		case "ip", "host", "path", "method":
			if name != "" {
				return nil, fmt.Errorf("key source %q: %s takes no argument", part, kind)
			}
			out = append(out, keySource{kind: kind})
		default:
			return nil, fmt.Errorf("key source %q: want header:NAME, ip, host, path or method", part)
		}
	}
	if len(out) > 8 {
		return nil, fmt.Errorf("key %q: at most 8 sources", spec)
	}
	return out, nil
}

// authRequest is what forward-auth knows of the original request.
type authRequest struct {
	c       *gin.Context
	trusted []netip.Prefix
}

func (r authRequest) header(name string) string { return r.c.GetHeader(name) }

// host is the original request's host: X-Forwarded-Host (Caddy, Traefik,
// nginx recipe) or the Host the proxy sent (Envoy keeps the original).
func (r authRequest) host() string {
	if h := r.header("X-Forwarded-Host"); h != "" {
		return h
	}
	return r.c.Request.Host
}

// path is the original request's path without its query: X-Forwarded-Uri
// (Caddy, Traefik), X-Original-URI (nginx recipe), or what follows the
// policy in the endpoint's own path (Envoy's path_prefix).
func (r authRequest) path() string {
	p := r.header("X-Forwarded-Uri")
	if p == "" {
		p = r.header("X-Original-Uri")
	}
	if p == "" {
		p = r.c.Param("path")
	}
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	if p == "" {
		p = "/"
	}
	return p
}

func (r authRequest) method() string {
	if m := r.header("X-Forwarded-Method"); m != "" {
		return m
	}
	if m := r.header("X-Original-Method"); m != "" {
		return m
	}
	return r.c.Request.Method
}

// ip is the client's address. X-Forwarded-For and X-Real-IP are believed
// only when they come from a trusted proxy: the address is the right-most
// X-Forwarded-For entry that is not itself a trusted proxy, else X-Real-IP,
// else (every hop trusted) the left-most entry. Zone ids are dropped
// (2001:db8::1%eth0 is 2001:db8::1): they name the proxy's interface, not
// the client, and must not make a second key.
func (r authRequest) ip() string {
	peer := peerAddr(r.c.Request.RemoteAddr)
	if !peer.IsValid() {
		return ""
	}
	if !isTrusted(peer, r.trusted) {
		return peer.String()
	}
	var leftmost netip.Addr // set only when every hop is a trusted proxy
	if xff := r.c.Request.Header.Values("X-Forwarded-For"); len(xff) > 0 {
		hops := strings.Split(strings.Join(xff, ","), ",")
		for i := len(hops) - 1; i >= 0; i-- {
			a, ok := parseHop(hops[i])
			if !ok {
				break
			}
			if !isTrusted(a, r.trusted) {
				return a.String()
			}
			if i == 0 {
				leftmost = a
			}
		}
	}
	if a, ok := parseHop(r.header("X-Real-Ip")); ok {
		return a.String()
	}
	if leftmost.IsValid() {
		return leftmost.String()
	}
	return peer.String()
}

// parseHop reads one address of a forwarding header, without its zone.
func parseHop(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	return a.Unmap().WithZone(""), err == nil
}

func peerAddr(remote string) netip.Addr {
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		return ap.Addr().Unmap().WithZone("")
	}
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a, _ := netip.ParseAddr(host)
	return a.Unmap().WithZone("")
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ParseTrustedProxies reads "10.0.0.0/8,127.0.0.1" (bare addresses are one
// host) for --trusted-proxies.
func ParseTrustedProxies(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if p, err := netip.ParsePrefix(part); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(part)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: want a CIDR such as 10.0.0.0/8 or an address", part)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// key builds the hit's client id from the sources; a source missing from
// the request is an error naming it. Ids longer than the log accepts are
// replaced by their SHA-256.
func (r authRequest) key(sources []keySource) (string, error) {
	parts := make([]string, 0, len(sources))
	for _, s := range sources {
		var v string
		switch s.kind {
		case "header":
			v = r.header(s.name)
		case "ip":
			v = r.ip()
		case "host":
			v = r.host()
		case "path":
			v = r.path()
		case "method":
			v = r.method()
		}
		if v == "" {
			return "", fmt.Errorf("key source %s is missing from the request", s)
		}
		parts = append(parts, v)
	}
	k := strings.Join(parts, "|")
	if cluster.ValidateClient(k) != nil {
		sum := sha256.Sum256([]byte(k))
		k = "sha256:" + hex.EncodeToString(sum[:])
	}
	return k, nil
}

// cost reads "?cost=N" or "?cost=header:X-Cost"; a named header that is
// absent means cost 1.
func (r authRequest) cost(spec string) (int64, error) {
	if spec == "" {
		return 1, nil
	}
	v, from := spec, "cost"
	if name, ok := strings.CutPrefix(spec, "header:"); ok {
		if name == "" {
			return 0, errors.New("cost source header: needs a header name")
		}
		v, from = r.header(name), "header "+http.CanonicalHeaderKey(name)
		if v == "" {
			return 1, nil
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s %q must be a whole number >= 1", from, v)
	}
	return n, nil
}

// auth is GET (or any method) /v1/auth/:policy[/*path].
func (a *API) auth(c *gin.Context) {
	start := time.Now()
	policyName := c.Param("policy")
	if err := policy.ValidateName(policyName); err != nil {
		writeProblem(c, http.StatusNotFound, CodeUnknownPolicy, "forward-auth: policy "+err.Error())
		return
	}
	r := authRequest{c: c, trusted: a.cfg.TrustedProxies}
	spec, ok := c.GetQuery("key")
	if !ok {
		spec = c.GetHeader(HeaderAuthKey)
	}
	sources, err := parseKeySpec(spec)
	if err != nil {
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, "forward-auth: "+err.Error())
		return
	}
	key, err := r.key(sources)
	if err != nil {
		// 401, not 400: nginx's auth_request passes on only 2xx, 401 and
		// 403 and turns anything else into a 500, which a fail-open
		// proxy would let through unlimited. A request without its key
		// is the client's fault, never a limiter outage.
		writeProblem(c, http.StatusUnauthorized, CodeMissingKey, "forward-auth: "+err.Error())
		return
	}
	costSpec, ok := c.GetQuery("cost")
	if !ok {
		costSpec = c.GetHeader(HeaderAuthCost)
	}
	cost, err := r.cost(costSpec)
	if err != nil {
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, "forward-auth: "+err.Error())
		return
	}
	refuse := http.StatusTooManyRequests
	if s := c.Query("refuse_status"); s != "" {
		if refuse, err = strconv.Atoi(s); err != nil || (refuse != 429 && refuse != 403 && refuse != 401) {
			writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("forward-auth: refuse_status %q: want 429, 403 or 401", s))
			return
		}
	}

	hit, err := cluster.ValidateHit(policyName, key, cost)
	if err != nil { // the name was checked above and the key made valid
		invalidHit(c, err, "forward-auth: ")
		return
	}
	a.decideOne(c, oneCheck{hit: hit, start: start, refuse: refuse, prefix: "forward-auth: ", refusedDetail: authRefusedDetail,
		headerKey: HeaderAuthKey, headerValue: key})
}

// authRefusedDetail words a refusal of forward-auth.
func authRefusedDetail(h cluster.HitResult, _ policy.Policy, _ bool, _ window.Result, retryMs int64) string {
	return fmt.Sprintf("rate limit %q exceeded for this client; retry in %d ms", h.Policy, retryMs)
}
