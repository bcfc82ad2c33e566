// Package problem is the one error document of every HTTP endpoint rlnode
// serves, public and node-to-node: an RFC 9457 problem document with a
// stable machine-readable code.
package problem

import (
	"encoding/json"
	"net/http"
)

// ContentType is a problem document's media type.
const ContentType = "application/problem+json"

// Doc is a problem document.
type Doc struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
	// Errors names every error of the cluster's API the problem stands
	// for (node-to-node endpoints only), so the node that sent the
	// request matches them as if it had run the operation itself.
	Errors []string `json:"errors,omitempty"`
}

// New is a problem of status with the given code and detail.
func New(status int, code, detail string) Doc {
	return Doc{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail, Code: code}
}

// Write answers d on w, uncached.
func Write(w http.ResponseWriter, d Doc) {
	w.Header().Set("Content-Type", ContentType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(d.Status)
	json.NewEncoder(w).Encode(d)
}

// Decode reads a problem document from body; ok is false when body is not
// one (a proxy's HTML page, an old node's plain text).
func Decode(body []byte) (d Doc, ok bool) {
	if json.Unmarshal(body, &d) != nil || (d.Detail == "" && d.Title == "" && d.Code == "") {
		return Doc{}, false
	}
	return d, true
}
