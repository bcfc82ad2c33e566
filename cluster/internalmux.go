package cluster

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
)

// Node-to-node endpoints of membership and clock discipline, served under
// InternalPrefix beside the forwarding endpoint.
const (
	// ProgressPath tells the leader's promoter how far a joining server's
	// log reaches.
	ProgressPath = "/internal/v1/progress"
)

// Progress is a server's answer on ProgressPath.
type Progress struct {
	ID           string `json:"id"`
	LastLogIndex uint64 `json:"lastLogIndex"`
}

// internalMux routes InternalPrefix: the endpoints below, and everything
// else to the forwarder (its own path, or its not-found problem).
func (n *Node) internalMux() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", n.fwd)
	mux.HandleFunc("POST "+GrantPath, n.guardInternal(n.serveGrant))
	mux.HandleFunc("POST "+ReturnPath, n.guardInternal(n.serveReturn))
	mux.HandleFunc("GET "+ClockPath, n.guardInternal(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, n.ClockReading())
	}))
	mux.HandleFunc("GET "+ProgressPath, n.guardInternal(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, Progress{ID: n.cfg.ID, LastLogIndex: n.raft.LastIndex()})
	}))
	mux.HandleFunc("GET "+BootstrapInfoPath, n.guardInternal(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, n.BootstrapInfo())
	}))
	mux.HandleFunc("POST "+BootstrapClaimPath, n.guardInternal(func(w http.ResponseWriter, r *http.Request) {
		var c BootstrapClaim
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&c); err != nil {
			writeProblem(w, http.StatusBadRequest, "invalid_request", "bootstrap claim: "+err.Error())
			return
		}
		if err := n.AcceptClaim(c); err != nil {
			status := http.StatusInternalServerError
			if errors.Is(err, ErrClaimRefused) {
				status = http.StatusConflict
			}
			writeProblem(w, status, "invalid_request", err.Error())
			return
		}
		writeJSON(w, map[string]string{"accepted": c.By})
	}))
	return mux
}

// guardInternal requires the cluster token, as the forwarding endpoint does.
func (n *Node) guardInternal(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if tok := n.cfg.ClusterToken; tok != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(tok)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="rlnode"`)
				writeProblem(w, http.StatusUnauthorized, "unauthorized", "this endpoint needs the cluster token: Authorization: Bearer <token>")
				return
			}
		}
		h(w, r)
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(v)
}
