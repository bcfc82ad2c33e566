// Package ginrl adapts rlnode's client middleware to Gin.
//
//	r.Use(ginrl.Middleware(c, "api", client.KeyHeader("X-Api-Key"), client.WithFailMode(client.FailOpen)))
package ginrl

import (
	"github.com/gin-gonic/gin"

	"github.com/rlnode/rlnode/client"
)

// Middleware rate-limits a Gin route group the way client.Middleware does a
// net/http handler: the same headers, 429 problem+json and fail mode.
func Middleware(c *client.Client, policy string, key client.KeyFunc, opts ...client.Option) gin.HandlerFunc {
	l := client.NewLimiter(c, policy, key, opts...)
	return func(gc *gin.Context) {
		if !l.Admit(gc.Writer, gc.Request) {
			gc.Abort()
			return
		}
		gc.Next()
	}
}
