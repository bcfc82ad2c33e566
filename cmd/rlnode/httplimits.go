package main

import (
	"flag"
	"fmt"

	"github.com/rlnode/rlnode/httpapi"
)

// httpLimits are the HTTP port's connection caps (docs/security.md, HTTP
// port). The per-address cap keeps one address from taking the port; an
// address that many applications share (a reverse proxy) may need it
// raised.
type httpLimits struct {
	maxConns, maxConnsPerIP int
	// bodyBudget is the body bytes the port's requests in flight may hold
	// in memory together (httpapi/bodies.go).
	bodyBudget int64
}

// defaultHTTPMaxConnsPerIP leaves one address an eighth of the port.
const defaultHTTPMaxConnsPerIP = 1024

func (h *httpLimits) flags(fs *flag.FlagSet) {
	fs.IntVar(&h.maxConns, "http-max-conns", maxHTTPConns, "most open HTTP connections; past seven eighths of it, idle keep-alive connections are closed first")
	fs.Int64Var(&h.bodyBudget, "http-body-budget", httpapi.DefaultBodyBudget, "request body bytes the HTTP port's requests in flight may hold in memory together (each request's first 4 KiB aside); past it a request is answered 503 busy")
	fs.IntVar(&h.maxConnsPerIP, "http-max-conns-per-ip", defaultHTTPMaxConnsPerIP, "most open HTTP connections from one IP address (its idle ones are closed first; raise it for a reverse proxy in front of many clients)")
}

func (h *httpLimits) validate() []error {
	if h.bodyBudget < httpapi.MaxBodyTable {
		return []error{fmt.Errorf("--http-body-budget %d: must be at least %d (one whole policy table)", h.bodyBudget, httpapi.MaxBodyTable)}
	}
	if h.maxConns < 1 || h.maxConnsPerIP < 1 || h.maxConnsPerIP > h.maxConns {
		return []error{fmt.Errorf("--http-max-conns %d, --http-max-conns-per-ip %d: need 1 <= per-ip <= total", h.maxConns, h.maxConnsPerIP)}
	}
	return nil
}
