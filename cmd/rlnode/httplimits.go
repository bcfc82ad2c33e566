package main

import (
	"flag"
	"fmt"
)

// httpLimits are the HTTP port's connection caps (docs/security.md, HTTP
// port). The per-address cap keeps one address from taking the port; an
// address that many applications share (a reverse proxy) may need it
// raised.
type httpLimits struct {
	maxConns, maxConnsPerIP int
}

// defaultHTTPMaxConnsPerIP leaves one address an eighth of the port.
const defaultHTTPMaxConnsPerIP = 1024

func (h *httpLimits) flags(fs *flag.FlagSet) {
	fs.IntVar(&h.maxConns, "http-max-conns", maxHTTPConns, "most open HTTP connections; past seven eighths of it, idle keep-alive connections are closed first")
	fs.IntVar(&h.maxConnsPerIP, "http-max-conns-per-ip", defaultHTTPMaxConnsPerIP, "most open HTTP connections from one IP address (its idle ones are closed first; raise it for a reverse proxy in front of many clients)")
}

func (h *httpLimits) validate() []error {
	if h.maxConns < 1 || h.maxConnsPerIP < 1 || h.maxConnsPerIP > h.maxConns {
		return []error{fmt.Errorf("--http-max-conns %d, --http-max-conns-per-ip %d: need 1 <= per-ip <= total", h.maxConns, h.maxConnsPerIP)}
	}
	return nil
}
