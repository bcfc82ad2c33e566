package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/internal/bearer"
	"github.com/rlnode/rlnode/internal/problem"
)

// The node-to-node endpoints. The cluster owns and serves them
// (InternalHandler); the binary mounts them beside the public API, which
// lives in httpapi alone.
const (
	// InternalPrefix starts every node-to-node path.
	InternalPrefix = "/internal/"
	// ForwardPath is the leader's endpoint for forwarded hits (the binary
	// codec of wire.go).
	ForwardPath = "/internal/v1/hits"
	// JoinPath is where a server that is not yet a member asks any member
	// to add it; a follower passes the request on to the leader.
	JoinPath = "/internal/v1/join"
	// ProgressPath tells the leader's promoter how far a joining server's
	// log reaches.
	ProgressPath = "/internal/v1/progress"
	// ClockPath serves this node's clock to peers.
	ClockPath = "/internal/v1/clock"
	// BootstrapInfoPath and BootstrapClaimPath serve the symmetric
	// bootstrap (bootstrap.go).
	BootstrapInfoPath  = "/internal/v1/bootstrap"
	BootstrapClaimPath = "/internal/v1/bootstrap/claim"
	// RemovedPath is where the leader tells a server it has just removed
	// (removal.go).
	RemovedPath = "/internal/v1/removed"
	// leaderPrefix starts the operations only the leader runs
	// (leaderops.go): a node that no longer leads refuses them, it never
	// passes them on.
	leaderPrefix = "/internal/v1/leader/"
)

// Progress is a server's answer on ProgressPath.
type Progress struct {
	ID           string `json:"id"`
	LastLogIndex uint64 `json:"lastLogIndex"`
}

// InternalHandler serves the node-to-node endpoints. With a cluster token
// every request must carry it. Errors are problem documents like the public
// API's, naming the cluster's errors they stand for.
func (n *Node) InternalHandler() http.Handler { return n.internal }

// Mount returns a handler that sends InternalPrefix to InternalHandler and
// every other request to public, on the raw path (no cleaning or
// redirects: client ids may hold escaped slashes and dots).
func (n *Node) Mount(public http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, InternalPrefix) {
			n.internal.ServeHTTP(w, r)
			return
		}
		public.ServeHTTP(w, r)
	})
}

// internalMux routes InternalPrefix, every endpoint behind the token.
func (n *Node) internalMux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, http.StatusNotFound, "not_found", fmt.Sprintf("no endpoint %s %s", r.Method, r.URL.Path))
	})
	mux.Handle(ForwardPath, n.fwd)
	mux.HandleFunc("GET "+ClockPath, func(w http.ResponseWriter, r *http.Request) {
		clockProof{token: []byte(n.cfg.ClusterToken)}.serveReading(w, r, n.ClockReading())
	})
	mux.HandleFunc("GET "+ProgressPath, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, Progress{ID: n.cfg.ID, LastLogIndex: n.raft.LastIndex()})
	})
	mux.HandleFunc("GET "+BootstrapInfoPath, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, n.boot.info())
	})
	mux.HandleFunc("POST "+BootstrapClaimPath, func(w http.ResponseWriter, r *http.Request) {
		var c BootstrapClaim
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&c); err != nil {
			writeProblem(w, http.StatusBadRequest, "invalid_request", "bootstrap claim: "+err.Error())
			return
		}
		if err := n.boot.accept(c); err != nil {
			status := http.StatusInternalServerError
			if errors.Is(err, ErrClaimRefused) {
				status = http.StatusConflict
			}
			writeProblem(w, status, "invalid_request", err.Error())
			return
		}
		writeJSON(w, map[string]string{"accepted": c.By})
	})
	mux.HandleFunc("GET "+TopPath, n.views.serveTop)
	mux.HandleFunc("GET "+MemberStatusPath, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, n.views.LocalMemberStatus())
	})
	mux.HandleFunc("POST "+JoinPath, n.serveJoin)
	mux.HandleFunc("GET "+ConfigurationPath, n.serveConfiguration)
	mux.HandleFunc("POST "+RemovedPath, n.removal.serveNotice)
	n.mountLeaderOps(mux)
	mux.HandleFunc("POST "+opGrant.path(), opGrant.handler(n))
	mux.HandleFunc("POST "+opReturn.path(), opReturn.handler(n))
	mux.HandleFunc("POST "+opPermit.path(), opPermit.handler(n))
	mux.HandleFunc("POST "+opReservation.path(), opReservation.handler(n))
	mux.HandleFunc("POST "+opCalls.path(), opCalls.handler(n))
	mux.HandleFunc("POST "+CallsPath, n.serveCallsHop)
	return n.requireToken(clockProof{token: []byte(n.cfg.ClusterToken)}.proveViews(mux))
}

// requireToken guards every node-to-node endpoint with the cluster token:
// the bearer, or on the clock endpoint and the views' reads the request's
// proof of it (clockproof.go), which sends no token.
func (n *Node) requireToken(h http.Handler) http.Handler {
	tok := n.cfg.ClusterToken
	if tok == "" {
		return h
	}
	proof := clockProof{token: []byte(tok)}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && (r.URL.Path == ClockPath || provenView(r.URL.Path)) {
			if _, ok := proof.requestNonce(r); ok {
				h.ServeHTTP(w, r)
				return
			}
		}
		if !bearer.Valid(r.Header.Get("Authorization"), tok) {
			w.Header().Set("WWW-Authenticate", bearer.Challenge)
			writeProblem(w, http.StatusUnauthorized, "unauthorized", "this endpoint needs the cluster token: Authorization: Bearer <token>")
			return
		}
		h.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(v)
}

func writeProblem(w http.ResponseWriter, status int, code, detail string) {
	problem.Write(w, problem.New(status, code, detail))
}

// serveConfiguration is ConfigurationPath (configuration.go).
func (n *Node) serveConfiguration(w http.ResponseWriter, r *http.Request) {
	last := n.raft.LastIndex()
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		writeError(w, n.cfg.ID, fmt.Errorf("read configuration: %w", err))
		return
	}
	ans := ConfigurationAnswer{ID: n.cfg.ID, LastIndex: last, Servers: []ConfigServer{}}
	for _, s := range cf.Configuration().Servers {
		ans.Servers = append(ans.Servers, ConfigServer{ID: string(s.ID), RaftAddr: string(s.Address), Voter: s.Suffrage == raft.Voter})
	}
	ans.Leader, ans.LeaderHTTPAddr = n.Leader()
	if r.URL.Query().Has("verify") && n.IsLeader() {
		ans.Verified = awaitFuture(n.raft.VerifyLeader(), n.stop) == nil
	}
	w.Header().Set(HeaderServedBy, n.cfg.ID)
	writeJSON(w, ans)
}
