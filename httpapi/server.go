package httpapi

import (
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"
)

// NewServer wraps a handler in an http.Server with the limits a public
// endpoint needs: slow or huge headers cannot pin connections.
func NewServer(h http.Handler, logger hclog.Logger) *http.Server {
	return &http.Server{
		Handler:           guardHeaders(h),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    serverHeaderLimit,
		ErrorLog:          logger.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
}
