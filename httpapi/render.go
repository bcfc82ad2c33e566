package httpapi

import (
	"encoding/json"
	"net/http"
)

// jsonRender writes compact JSON with a chosen content type (gin's own JSON
// renderer fixes the type to application/json).
type jsonRender struct {
	contentType string
	v           any
}

func (r jsonRender) Render(w http.ResponseWriter) error {
	r.WriteContentType(w)
	// The same bytes as json.Marshal plus a newline (an Encoder escapes
	// HTML as Marshal does, and marshals fully before its one Write), without
	// Marshal's copy out of its pooled buffer and the append's second copy.
	return json.NewEncoder(w).Encode(r.v)
}

func (r jsonRender) WriteContentType(w http.ResponseWriter) {
	w.Header().Set("Content-Type", r.contentType)
}
