// Package apitest runs clustertest clusters whose nodes serve the real
// public HTTP API, for tests of everything that speaks to rlnode over HTTP.
package apitest

import (
	"net/http"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/httpapi"
)

// Options returns o with the public API (debug endpoints on) mounted.
func Options(o clustertest.Options) clustertest.Options {
	o.API = API
	return o
}

// API is the public API of one harness node.
func API(node *cluster.Node, token string, logger hclog.Logger) http.Handler {
	return httpapi.New(httpapi.Config{Node: node, Token: token, DebugEndpoints: true, Logger: logger}).Handler()
}

// Start is clustertest.Start with the public API.
func Start(t testing.TB, n int, o clustertest.Options) *clustertest.Cluster {
	return clustertest.Start(t, n, Options(o))
}
