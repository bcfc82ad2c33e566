package client_test

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/client"
	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/httpapi/apitest"
	"github.com/rlnode/rlnode/policy"
)

// leasedApp is the example in docs/leases-in-your-application.md, word
// for word (TestLeasesDocShowsTheTestedExample checks).
func leasedApp(ctx context.Context, addrs []string, serve func(http.Handler) error) error {
	c, err := client.New(client.Config{Addrs: addrs})
	if err != nil {
		return err
	}
	defer c.Close()

	// One Local per process: hot keys are decided here, from units the
	// cluster leased to this process; cold keys go to the cluster.
	local, err := client.NewLocal(c, client.LocalConfig{})
	if err != nil {
		return err
	}
	// On the way out, give back the units not spent.
	defer local.Close(context.Background())

	// In code: one decision.
	res, err := local.Allow(ctx, "api", "user-42")
	if err != nil {
		return err // no decision: the cluster is unreachable and no units are held
	}
	if !res.Allowed {
		log.Printf("over the limit; retry in %s", res.RetryAfter)
	}

	// As middleware: every request decided the same way, with the
	// RateLimit headers, 429 when over and 503 when no decision can be made.
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") })
	limit := client.Middleware(c, "api", client.KeyHeader("X-Api-Key"), client.WithLocal(local))
	return serve(limit(hello))
}

// The example runs against a cluster with a leased policy: requests pass
// up to the limit, then 429.
func TestLeasedAppExample(t *testing.T) {
	cl := apitest.Start(t, 3, clustertest.Options{Policies: []policy.Policy{leased("api", 10, time.Minute)}})
	cl.Leader(10 * time.Second)
	cl.WaitConverged(10 * time.Second)
	var addrs []string
	for _, n := range cl.Nodes {
		addrs = append(addrs, n.HTTPAddr)
	}
	codes := map[int]int{}
	err := leasedApp(context.Background(), addrs, func(h http.Handler) error {
		srv := httptest.NewServer(h)
		defer srv.Close()
		for i := 0; i < 15; i++ {
			codes[get(t, srv.URL, "X-Api-Key", "user-7").status]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if codes[200] != 10 || codes[429] != 5 {
		t.Fatalf("answers %v: want 10 × 200 then 5 × 429", codes)
	}
}

// The docs show the example that runs above, not a copy that drifted.
func TestLeasesDocShowsTheTestedExample(t *testing.T) {
	doc, err := os.ReadFile("../docs/leases-in-your-application.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_local_test.go")
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(string(src), "func leasedApp(")
	end := strings.Index(string(src)[start:], "\n}\n")
	fn := string(src)[start : start+end+2]
	if !strings.Contains(string(doc), fn) {
		t.Fatalf("docs/leases-in-your-application.md does not show leasedApp as it is in client/example_local_test.go:\n%s", fn)
	}
}
