package cluster

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/tlsconf"
)

const proofToken = "clock-proof-token"

// recordingServer serves h and records every request's headers.
type recordingServer struct {
	*httptest.Server
	mu      sync.Mutex
	headers []http.Header
}

func newRecordingServer(t *testing.T, h http.HandlerFunc) *recordingServer {
	s := &recordingServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.headers = append(s.headers, r.Header.Clone())
		s.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *recordingServer) sawToken(tok string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.headers {
		for _, vs := range h {
			for _, v := range vs {
				if strings.Contains(v, tok) {
					return true
				}
			}
		}
	}
	return false
}

func clockMember(id string, token string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		clockProof{token: []byte(token)}.serveReading(w, r, ClockReading{ID: id, NowMs: time.Now().UnixMilli(), Version: "v", Format: fsm.CurrentFormat})
	}
}

func tokenReader(token string) *clockReader {
	return newClockReader(newPeerClient(token, nil, nil), token, nil, hclog.NewNullLogger())
}

func readAt(t *testing.T, r *clockReader, addr, want string) (ClockReading, readResult) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rd, _, _, res, _ := r.read(ctx, addr, want)
	return rd, res
}

// TestClockReadingProofUnderToken: a member that knows the token proves
// its reading, and no request carries the token; an impostor answering
// format 99, a member answering for another, a release before proofs
// (401 without the bearer), a replayed answer and a member of another
// cluster's token are no readings.
func TestClockReadingProofUnderToken(t *testing.T) {
	r := tokenReader(proofToken)

	m := newRecordingServer(t, clockMember("n2", proofToken))
	rd, res := readAt(t, r, m.Listener.Addr().String(), "n2")
	if res != readProven || rd.ID != "n2" || rd.Format != fsm.CurrentFormat {
		t.Fatalf("the member's own reading: %+v %v; want proven", rd, res)
	}

	var replay struct {
		proof string
		body  []byte
	}
	im := newRecordingServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if replay.proof != "" {
			w.Header().Set(headerClockProof, replay.proof)
			w.Write(replay.body)
			return
		}
		json.NewEncoder(w).Encode(ClockReading{ID: "n2", NowMs: time.Now().UnixMilli(), Format: 99})
	})
	if rd, res := readAt(t, r, im.Listener.Addr().String(), "n2"); res != readUnproven {
		t.Errorf("an impostor's format 99: %+v %v; want unproven", rd, res)
	}

	// A recorded answer of the real member, replayed to a fresh nonce.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", ClockPath, nil)
	fixed := make([]byte, clockNonceLen)
	req.Header.Set(headerClockNonce, hex.EncodeToString(fixed))
	req.Header.Set(headerClockAuth, "")
	p := clockProof{token: []byte(proofToken)}
	if _, ok := p.requestNonce(req); ok { // no valid auth: no proof
		t.Fatal("a request without the token's proof got a nonce accepted")
	}
	req.Header.Set(headerClockAuth, hex.EncodeToString(p.requestMAC(fixed, ClockPath)))
	clockMember("n2", proofToken)(rec, req)
	replay.proof, replay.body = rec.Header().Get(headerClockProof), rec.Body.Bytes()
	if replay.proof == "" {
		t.Fatal("the member sent no proof to a request that proved the token")
	}
	if rd, res := readAt(t, r, im.Listener.Addr().String(), "n2"); res != readUnproven {
		t.Errorf("a replayed answer: %+v %v; want unproven", rd, res)
	}

	other := newRecordingServer(t, clockMember("n3", proofToken))
	if _, res := readAt(t, r, other.Listener.Addr().String(), "n2"); res != readUnproven {
		t.Errorf("member n3 answering at n2's address: %v; want unproven", res)
	}
	stranger := newRecordingServer(t, clockMember("n2", "another-cluster"))
	if _, res := readAt(t, r, stranger.Listener.Addr().String(), "n2"); res != readUnproven {
		t.Errorf("a node of another token answering as n2: %v; want unproven", res)
	}
	old := newRecordingServer(t, func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, http.StatusUnauthorized, "unauthorized", "this endpoint needs the cluster token")
	})
	if _, res := readAt(t, r, old.Listener.Addr().String(), "n2"); res != readUnproven {
		t.Errorf("a release before proofs (401 without the bearer): %v; want unproven", res)
	}
	closed := closedAddr(t)
	if _, res := readAt(t, r, closed, "n2"); res != readUnreached {
		t.Errorf("a closed port: %v; want unreached", res)
	}
	for name, s := range map[string]*recordingServer{"member": m, "impostor": im, "n3": other, "stranger": stranger, "old": old} {
		if s.sawToken(proofToken) {
			t.Errorf("the %s at an address received the cluster token", name)
		}
	}
}

// TestClockReadingOpenCluster: without a token or mutual TLS there is
// nothing to prove with; a reading counts as before.
func TestClockReadingOpenCluster(t *testing.T) {
	m := newRecordingServer(t, clockMember("n2", ""))
	if rd, res := readAt(t, tokenReader(""), m.Listener.Addr().String(), "n2"); res != readProven || rd.ID != "n2" {
		t.Fatalf("open cluster: %+v %v; want the reading", rd, res)
	}
}

// TestClockReadingProofUnderMutualTLS: the answer's server certificate
// must name the member the reading is attributed to.
func TestClockReadingProofUnderMutualTLS(t *testing.T) {
	dir := t.TempDir()
	if _, err := tlsconf.Init(tlsconf.InitOptions{Dir: dir, Nodes: []string{"n1", "n2", "n3"}, Valid: time.Hour}); err != nil {
		t.Fatal(err)
	}
	src := func(name string) *tlsconf.Source {
		s, err := tlsconf.Load(tlsconf.Files{Cert: filepath.Join(dir, tlsconf.CertFile(name)), Key: filepath.Join(dir, tlsconf.KeyFile(name)), CA: filepath.Join(dir, "ca.pem")})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	serve := func(cert, claims string) string {
		ln, err := tls.Listen("tcp", "127.0.0.1:0", src(cert).ServerConfig())
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: clockMember(claims, ""), ReadHeaderTimeout: time.Second}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		return ln.Addr().String()
	}
	n1 := src("n1")
	r := newClockReader(newPeerClient("", n1, nil), "", n1, hclog.NewNullLogger())
	if rd, res := readAt(t, r, serve("n2", "n2"), "n2"); res != readProven || rd.ID != "n2" {
		t.Fatalf("n2 with its own certificate: %+v %v; want proven", rd, res)
	}
	if rd, res := readAt(t, r, serve("n3", "n2"), "n2"); res != readUnproven {
		t.Errorf("n3's certificate answering as n2: %+v %v; want unproven", rd, res)
	}
	if rd, res := readAt(t, r, serve("n3", "n3"), ""); res != readProven || rd.ID != "n3" {
		t.Errorf("a --join address (any member): %+v %v; want n3's reading", rd, res)
	}
}

func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestProvenViewReads: the views' and the promoter's reads of a member
// under a token send no bearer and count only proven answers.
func TestProvenViewReads(t *testing.T) {
	status := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, Progress{ID: "n2", LastLogIndex: 42})
	})
	p := clockProof{token: []byte(proofToken)}
	m := newRecordingServer(t, p.proveViews(status).ServeHTTP)
	im := newRecordingServer(t, status)
	r := provenReader{peers: newPeerClient(proofToken, nil, nil), reader: tokenReader(proofToken)}
	var got Progress
	if err := r.getJSON(context.Background(), "http://"+m.Listener.Addr().String()+ProgressPath, &got); err != nil || got.LastLogIndex != 42 {
		t.Fatalf("the member's proven answer: %+v %v", got, err)
	}
	if err := r.getJSON(context.Background(), "http://"+im.Listener.Addr().String()+ProgressPath, &got); err == nil {
		t.Error("an impostor's unproven answer was accepted")
	}
	// A read with a query is proven over its whole request URI.
	if err := r.getJSON(context.Background(), "http://"+m.Listener.Addr().String()+TopPath+"?policy=a", &got); err != nil {
		t.Errorf("a proven top-keys read: %v", err)
	}
	if m.sawToken(proofToken) || im.sawToken(proofToken) {
		t.Error("a view read sent the cluster token to an address")
	}
}

// TestReadProofIsBoundToItsRequest: a sniffed request proof admits that
// same read only, never another endpoint or query.
func TestReadProofIsBoundToItsRequest(t *testing.T) {
	p := clockProof{token: []byte(proofToken)}
	nonce := make([]byte, clockNonceLen)
	auth := hex.EncodeToString(p.requestMAC(nonce, ClockPath))
	for uri, want := range map[string]bool{ClockPath: true, TopPath + "?policy=a": false, MemberStatusPath: false} {
		req := httptest.NewRequest("GET", uri, nil)
		req.Header.Set(headerClockNonce, hex.EncodeToString(nonce))
		req.Header.Set(headerClockAuth, auth)
		if _, ok := p.requestNonce(req); ok != want {
			t.Errorf("the clock read's proof on %s: admitted %v, want %v", uri, ok, want)
		}
	}
}
