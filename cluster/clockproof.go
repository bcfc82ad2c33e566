package cluster

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rlnode/rlnode/cluster/transport"
	"github.com/rlnode/rlnode/tlsconf"
)

// Clock readings carry proof (issue 35 item 9). Each node reads every
// member's clock, release and log format once a second at the member's
// HTTP address, and the version gate opens on what those readings say.
// An address is not an identity: a member is down for a moment in every
// rolling upgrade, and whoever binds its port then answers for it. The
// readings used to go out with the cluster token as a bearer, so that
// party received the token, and by answering a newer format it opened the
// gate early (an old-release member then halted on the entries).
//
// So a reading request never carries the token, and a reading counts
// only when the answer proves it is the member's:
//
//   - with a cluster token, the requester sends a fresh random nonce N and
//     HMAC(token, "clock request"|N|request URI) (it knows the token; a
//     replay only yields the same read), and the member answers with
//     HMAC(token, "clock answer"|N|H(id|body)) over the exact body it
//     sent, which names it (the primitive is the Raft handshake's,
//     transport.ProofMAC). The token never crosses the wire.
//   - under mutual TLS, the answer must come over a connection whose
//     verified server certificate names the member (tlsconf.Source.PeerNode).
//
// With both, both. With neither there is no secret to prove anything
// with (an open cluster): readings count as before. An answer that
// cannot prove it is the member (a stranger, or a release before this
// scheme, which wants the bearer and answers 401) is no reading: the
// clock check counts the member as unread and the version gate as of
// unknown format (closed for anything past the oldest format, the safe
// side). Members of older releases still read this node's clock with the
// bearer (requireToken accepts either).
const (
	headerClockNonce = "Rlnode-Clock-Nonce"
	headerClockAuth  = "Rlnode-Clock-Auth"
	headerClockProof = "Rlnode-Clock-Proof"
	clockNonceLen    = 32
	// maxClockAnswer bounds a reading's body.
	maxClockAnswer = 64 << 10
)

// clockProof signs and checks readings with the cluster token.
type clockProof struct{ token []byte }

func (p clockProof) enabled() bool { return len(p.token) > 0 }

// requestMAC proves the token for one read: the nonce and the request
// URI (a replay yields that same read, never another).
func (p clockProof) requestMAC(nonce []byte, requestURI string) []byte {
	return transport.ProofMAC(p.token, "clock request", nonce, []byte(requestURI))
}

func (p clockProof) answerMAC(nonce []byte, id string, body []byte) []byte {
	h := sha256.New()
	var l [binary.MaxVarintLen64]byte
	h.Write(l[:binary.PutUvarint(l[:], uint64(len(id)))])
	h.Write([]byte(id))
	h.Write(body)
	return transport.ProofMAC(p.token, "clock answer", nonce, h.Sum(nil))
}

// requestNonce is a reading request's nonce, when it carries one and a
// valid proof of the token.
func (p clockProof) requestNonce(r *http.Request) ([]byte, bool) {
	if !p.enabled() {
		return nil, false
	}
	nonce, err := hex.DecodeString(r.Header.Get(headerClockNonce))
	if err != nil || len(nonce) != clockNonceLen {
		return nil, false
	}
	mac, err := hex.DecodeString(r.Header.Get(headerClockAuth))
	if err != nil || !hmac.Equal(mac, p.requestMAC(nonce, r.URL.RequestURI())) {
		return nil, false
	}
	return nonce, true
}

// serveReading answers a reading request with rd, and with the proof
// when the request proved the token.
func (p clockProof) serveReading(w http.ResponseWriter, r *http.Request, rd ClockReading) {
	body, err := json.Marshal(rd)
	if err != nil {
		writeProblem(w, http.StatusInternalServerError, "internal", "encode clock reading: "+err.Error())
		return
	}
	if nonce, ok := p.requestNonce(r); ok {
		w.Header().Set(headerClockProof, hex.EncodeToString(p.answerMAC(nonce, rd.ID, body)))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(body)
}

// readResult is what a reading request came to.
type readResult int

const (
	// readUnreached: no answer (refused, timed out): nothing is known.
	readUnreached readResult = iota
	// readUnproven: something answered at the address, but not with a
	// reading proven to be the member's.
	readUnproven
	// readProven: the member's own reading.
	readProven
)

// clockReader reads members' clocks and checks the proof.
type clockReader struct {
	client *http.Client
	https  bool
	proof  clockProof
	// certs is set under mutual TLS: the answer's server certificate
	// must name the member.
	certs *tlsconf.Source
	log   hclog.Logger

	mu     sync.Mutex
	warned map[string]time.Time // address: when an unproven answer was last logged
}

func newClockReader(p *peerClient, token string, src *tlsconf.Source, log hclog.Logger) *clockReader {
	c := &clockReader{client: p.client, https: p.tls, proof: clockProof{token: []byte(token)}, log: log, warned: map[string]time.Time{}}
	if src != nil && src.Mutual() {
		c.certs = src
	}
	return c
}

// read asks addr for its reading; want is the member it must prove to be
// ("" for any: a --join address whose member is not known yet, then the
// one the reading names). start and rtt time the request.
func (c *clockReader) read(ctx context.Context, addr, want string) (rd ClockReading, start time.Time, rtt time.Duration, res readResult, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, BaseURL(addr)+ClockPath, nil)
	if err != nil {
		return rd, start, 0, readUnreached, err
	}
	if c.https && req.URL.Scheme == "http" {
		req.URL.Scheme = "https"
	}
	var nonce []byte
	if c.proof.enabled() {
		nonce = make([]byte, clockNonceLen)
		if _, err := rand.Read(nonce); err != nil {
			return rd, start, 0, readUnreached, err
		}
		req.Header.Set(headerClockNonce, hex.EncodeToString(nonce))
		req.Header.Set(headerClockAuth, hex.EncodeToString(c.proof.requestMAC(nonce, req.URL.RequestURI())))
	}
	start = time.Now()
	resp, err := c.client.Do(req)
	if err != nil {
		return rd, start, 0, readUnreached, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxClockAnswer))
	rtt = time.Since(start)
	if err != nil {
		return rd, start, rtt, readUnreached, err
	}
	if resp.StatusCode != http.StatusOK {
		return rd, start, rtt, readUnproven, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	if err := json.Unmarshal(body, &rd); err != nil || rd.ID == "" {
		return ClockReading{}, start, rtt, readUnproven, fmt.Errorf("not a clock reading: %v", err)
	}
	if want != "" && rd.ID != want {
		return ClockReading{}, start, rtt, readUnproven, fmt.Errorf("the answer names %q, not %q", rd.ID, want)
	}
	if err := c.check(resp, nonce, rd.ID, body); err != nil {
		return ClockReading{}, start, rtt, readUnproven, err
	}
	return rd, start, rtt, readProven, nil
}

// warnUnproven logs an unproven answer from addr, at most once a minute
// per address (readings are taken every second).
func (c *clockReader) warnUnproven(addr, want string, err error) {
	c.mu.Lock()
	last, seen := c.warned[addr]
	now := time.Now()
	if seen && now.Sub(last) < time.Minute {
		c.mu.Unlock()
		return
	}
	if len(c.warned) >= maxVouchAnswers {
		clear(c.warned) // addresses are the members': few; a cache, not state
	}
	c.warned[addr] = now
	c.mu.Unlock()
	c.log.Warn("a clock reading that does not prove it is the member's counts as none (its format as unknown)",
		"addr", addr, "member", want, "error", err)
}

// check verifies that the answer is member id's.
func (c *clockReader) check(resp *http.Response, nonce []byte, id string, body []byte) error {
	if c.proof.enabled() {
		mac, err := hex.DecodeString(resp.Header.Get(headerClockProof))
		if err != nil || !hmac.Equal(mac, c.proof.answerMAC(nonce, id, body)) {
			return fmt.Errorf("the answer does not prove the cluster token (a release before proven readings, or not %s)", id)
		}
	}
	if c.certs != nil {
		name, _, err := c.certs.PeerNode(resp.TLS)
		if err != nil {
			return fmt.Errorf("the answer's certificate: %w", err)
		}
		if name != id {
			return fmt.Errorf("the answer's certificate names node %q, not %q", name, id)
		}
	}
	return nil
}

// The other reads of a member's state at its address are made the same
// way under a token: the operator's views of every member (its status
// with its release and format, its top keys: views.go) and the
// promoter's question how far a joining server's log reaches
// (promote.go). No bearer goes to an address, and an answer counts only
// with HMAC(token, "view answer <request URI>"|N|H(body)). Under mutual
// TLS the connection is a node's (the CA), as for every peer request.

// provenView reports whether path is a read answered with proof.
func provenView(path string) bool {
	return path == MemberStatusPath || path == TopPath || path == ProgressPath
}

func (p clockProof) viewMAC(requestURI string, nonce, body []byte) []byte {
	sum := sha256.Sum256(body)
	return transport.ProofMAC(p.token, "view answer "+requestURI, nonce, sum[:])
}

// proveViews wraps the internal endpoints: a view read whose request
// proved the token gets its answer proven.
func (p clockProof) proveViews(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		nonce, ok := p.requestNonce(r)
		if !ok || r.Method != http.MethodGet || !provenView(r.URL.Path) {
			h.ServeHTTP(w, r)
			return
		}
		ans := &bufferedAnswer{header: w.Header(), status: http.StatusOK}
		h.ServeHTTP(ans, r)
		w.Header().Set(headerClockProof, hex.EncodeToString(p.viewMAC(r.URL.RequestURI(), nonce, ans.body.Bytes())))
		w.WriteHeader(ans.status)
		w.Write(ans.body.Bytes())
	})
}

// bufferedAnswer holds an answer until its proof is computed.
type bufferedAnswer struct {
	header http.Header
	status int
	wrote  bool
	body   bytes.Buffer
}

func (b *bufferedAnswer) Header() http.Header { return b.header }
func (b *bufferedAnswer) WriteHeader(status int) {
	if !b.wrote {
		b.status, b.wrote = status, true
	}
}
func (b *bufferedAnswer) Write(p []byte) (int, error) {
	b.wrote = true
	return b.body.Write(p)
}

// provenReader reads members' state (viewPeers, and the promoter): with
// a token it reads with proof and sends no bearer; without one, as
// before.
type provenReader struct {
	peers  *peerClient
	reader *clockReader
}

func (v provenReader) getJSON(ctx context.Context, rawURL string, out any) error {
	if !v.reader.proof.enabled() {
		return v.peers.getJSON(ctx, rawURL, out)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return err
	}
	if v.reader.https && req.URL.Scheme == "http" {
		req.URL.Scheme = "https"
	}
	nonce := make([]byte, clockNonceLen)
	if _, err := rand.Read(nonce); err != nil {
		return err
	}
	req.Header.Set(headerClockNonce, hex.EncodeToString(nonce))
	req.Header.Set(headerClockAuth, hex.EncodeToString(v.reader.proof.requestMAC(nonce, req.URL.RequestURI())))
	resp, err := v.reader.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("read answer from %s: %w", rawURL, err)
	}
	if resp.StatusCode/100 != 2 {
		return decodeHTTPError(resp, body)
	}
	mac, err := hex.DecodeString(resp.Header.Get(headerClockProof))
	if err != nil || !hmac.Equal(mac, v.reader.proof.viewMAC(req.URL.RequestURI(), nonce, body)) {
		return fmt.Errorf("the answer from %s does not prove the cluster token (a release before proven readings, or not a member)", req.URL.Host)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("decode answer from %s: %w", rawURL, err)
	}
	return nil
}
