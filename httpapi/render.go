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
	b, err := json.Marshal(r.v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

func (r jsonRender) WriteContentType(w http.ResponseWriter) {
	w.Header().Set("Content-Type", r.contentType)
}
