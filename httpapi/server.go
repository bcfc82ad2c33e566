package httpapi

import (
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"
)

// NewServer wraps a handler in an http.Server with the limits a public
// endpoint needs: slow or huge headers cannot pin connections, and the
// request bodies in flight hold at most budget bytes in memory
// (bodies.go; 0: DefaultBodyBudget).
func NewServer(h http.Handler, logger hclog.Logger, budget int64) *http.Server {
	if budget <= 0 {
		budget = DefaultBodyBudget
	}
	return &http.Server{
		Handler:           guardHeaders(budgetBodies(&bodyBudget{limit: budget}, h)),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    serverHeaderLimit,
		ErrorLog:          logger.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
}

// budgetBodies counts every request's body against b, the routes of the
// table and the cluster's internal endpoints alike.
func budgetBodies(b *bodyBudget, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		release := b.wrap(r)
		defer release()
		next.ServeHTTP(w, r)
	})
}
