package cluster

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// InternalPrefix starts every path of the node-to-node endpoints the
// cluster serves itself (InternalHandler); the binary routes it there and
// everything else to the public API.
const InternalPrefix = "/internal/"

// InternalHandler serves the node-to-node endpoints: today POST ForwardPath,
// the batches of hits followers forward to the leader. With a cluster token
// every request must carry it. Errors are problem documents like the public
// API's.
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
		if r.URL.Path == JoinPath && r.Method == http.MethodPost {
			if err := n.checkJoinCaller(r); err != nil {
				writeProblem(w, http.StatusForbidden, "forbidden", err.Error())
				return
			}
		}
		public.ServeHTTP(w, r)
	})
}

// ServeHTTP implements InternalHandler.
func (f *forwarder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != ForwardPath {
		writeProblem(w, http.StatusNotFound, "not_found", fmt.Sprintf("no endpoint %s %s", r.Method, r.URL.Path))
		return
	}
	if r.Method != http.MethodPost {
		writeProblem(w, http.StatusMethodNotAllowed, "invalid_request", fmt.Sprintf("%s is not allowed on %s", r.Method, r.URL.Path))
		return
	}
	if tok := f.cfg.ClusterToken; tok != "" {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(tok)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="rlnode"`)
			writeProblem(w, http.StatusUnauthorized, "unauthorized", "this endpoint needs the cluster token: Authorization: Bearer <token>")
			return
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<20))
	if err != nil {
		writeProblem(w, http.StatusRequestEntityTooLarge, "invalid_request", "forward body: "+err.Error())
		return
	}
	out, err := f.serve(r.Context(), body)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, "invalid_request", strings.ReplaceAll(err.Error(), "\n", "; "))
		return
	}
	f.cfg.Observer.ForwardServed()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	w.Write(out)
}

// writeProblem answers an RFC 9457 problem document, the shape the public
// API uses.
func writeProblem(w http.ResponseWriter, status int, code, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
		Code   string `json:"code"`
	}{"about:blank", http.StatusText(status), status, detail, code})
}
