package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Every route gin serves is an entry of the route table, which is what
// declares its guard and query parameters: a route registered on the
// engine beside the table fails here. An entry is declared once.
func TestEveryRouteIsInTheTable(t *testing.T) {
	a := New(Config{Token: "s3cret", DebugEndpoints: true, MetricsHandler: http.NotFoundHandler()})
	table := map[string]Route{}
	for _, r := range a.routes() {
		key := r.Method + " " + r.Path
		if _, dup := table[key]; dup {
			t.Errorf("%s is declared twice", key)
		}
		if r.Handle == nil {
			t.Errorf("%s has no handler", key)
		}
		table[key] = r
	}
	served := map[string]bool{}
	for _, g := range a.engine.Routes() {
		key := g.Method + " " + g.Path
		if _, ok := table[key]; !ok {
			key = AnyMethod + " " + g.Path
		}
		if _, ok := table[key]; !ok {
			t.Errorf("%s %s is registered but not in the route table (httpapi/routes.go): declare its guard and query parameters there", g.Method, g.Path)
			continue
		}
		served[key] = true
	}
	for key := range table {
		if !served[key] {
			t.Errorf("%s is in the table but not served", key)
		}
	}
	// The table's guard is the one in front of the handler.
	for key, r := range table {
		if r.Guard != Admin {
			continue
		}
		w := httptest.NewRecorder()
		a.Handler().ServeHTTP(w, httptest.NewRequest(r.Method, strings.NewReplacer(":", "", "*", "").Replace(r.Path), nil))
		if w.Code != http.StatusUnauthorized {
			t.Errorf("%s without the token: %d %s; want 401", key, w.Code, w.Body)
		}
	}
}
