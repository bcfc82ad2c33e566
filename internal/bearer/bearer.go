// Package bearer checks the cluster token every guarded endpoint asks for
// (HTTP Authorization headers and gRPC authorization metadata alike).
package bearer

import (
	"crypto/subtle"
	"strings"
)

// Challenge is the WWW-Authenticate value of a 401.
const Challenge = `Bearer realm="rlnode"`

// Valid reports whether an authorization value ("Bearer <token>") carries
// token, comparing in constant time.
func Valid(authorization, token string) bool {
	got, ok := strings.CutPrefix(authorization, "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}
