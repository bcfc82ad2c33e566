package httpapi

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/gin-gonic/gin"

	problemdoc "github.com/rlnode/rlnode/internal/problem"
)

// Header limits. net/http itself answers a plain-text 431 (before any
// handler runs) once the request line and headers pass serverHeaderLimit;
// between MaxHeaderBytes and that, the guard below answers 431 as a problem
// document. The other answers net/http writes on its own, which cannot be
// problem documents, are listed in the README.
const (
	MaxHeaderBytes    = 64 << 10
	serverHeaderLimit = 256 << 10
)

// guardHeaders answers 431 as a problem document for requests whose request
// line and headers exceed MaxHeaderBytes.
func guardHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
		for k, vs := range r.Header {
			for _, v := range vs {
				n += len(k) + len(v) + 4
			}
		}
		if n > MaxHeaderBytes {
			w.Header().Set("Connection", "close")
			writeProblemHTTP(w, http.StatusRequestHeaderFieldsTooLarge, CodeInvalidRequest,
				fmt.Sprintf("request line and headers are %d bytes; at most %d are accepted", n, MaxHeaderBytes))
			return
		}
		if r.ContentLength != 0 && ignoresBody(r) {
			// net/http reads an unread body to its end before it writes
			// the answer, to keep the connection: a client that sends a
			// chunked body on a GET and never ends it would get no answer
			// to a hit that counted. Closing after the answer skips that.
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}

// ignoresBody reports whether the route never reads the request body.
func ignoresBody(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodDelete, http.MethodOptions:
		return true
	}
	return strings.HasPrefix(r.URL.Path, "/v1/auth/") // every method, body ignored
}

// writeProblemHTTP is writeProblem for plain net/http handlers.
func writeProblemHTTP(w http.ResponseWriter, status int, code, detail string) {
	b, _ := json.Marshal(problemdoc.New(status, code, detail))
	w.Header().Set("Content-Type", problemJSON)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// rejectAmbiguousQuery answers 400 for a query string that does not parse
// or names a parameter twice (cost=50&cost=1): which one counts would
// otherwise depend on the parser, and a proxy may have checked the other.
// It runs for every request, before routing.
func rejectAmbiguousQuery(c *gin.Context) {
	raw := c.Request.URL.RawQuery
	if raw == "" {
		return
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, "malformed query string: "+err.Error())
		return
	}
	for k, vs := range q {
		if len(vs) > 1 {
			writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("query parameter %q is given %d times; give it once", k, len(vs)))
			return
		}
	}
}

// knownQuery answers 400 naming a query parameter that is not in known, so
// a misspelt or miscased one (?COST=9) is not silently ignored. Each Route
// declares known (routes.go); register puts this in front of its handler.
func knownQuery(known []string) gin.HandlerFunc {
	return func(c *gin.Context) {
		if c.Request.URL.RawQuery == "" {
			return
		}
		for _, k := range slices.Sorted(maps.Keys(c.Request.URL.Query())) {
			if !slices.Contains(known, k) {
				writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, unknownParam(k, known))
				return
			}
		}
	}
}

func unknownParam(k string, known []string) string {
	for _, name := range known {
		if strings.EqualFold(name, k) {
			return fmt.Sprintf("query parameter %q is unknown (names are case-sensitive): did you mean %q?", k, name)
		}
	}
	if len(known) == 0 {
		return fmt.Sprintf("query parameter %q is unknown: this endpoint takes none", k)
	}
	return fmt.Sprintf("query parameter %q is unknown: this endpoint takes %s", k, strings.Join(known, ", "))
}
