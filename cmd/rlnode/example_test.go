package main

import (
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// examples/ratelimited-api runs as its doc comment says: in front of a
// node, the eleventh call in a window is a 429 with Retry-After.
func TestExampleRateLimitedAPI(t *testing.T) {
	proctest.Long(t)
	root, err := proctest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "ratelimited-api")
	build := exec.Command("go", "build", "-o", bin, "./examples/ratelimited-api")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the example: %v\n%s", err, out)
	}
	n := proctest.StartNode(t, rlnodeBin, "n1")
	proctest.WaitReady(t, n, 15*time.Second)
	listen := proctest.FreeAddr(t)
	proctest.Start(t, bin, "ratelimited-api", "-rlnode", n.HTTPAddr, "-listen", listen)

	get := func() (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+listen+"/hello", nil)
		req.Header.Set("X-Api-Key", "alice")
		return http.DefaultClient.Do(req)
	}
	proctest.Poll(t, 15*time.Second, func() error {
		resp, err := get()
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("first call: %d", resp.StatusCode)
		}
		return nil
	})
	for i := 2; i <= 11; i++ {
		resp, err := get()
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := 200
		if i == 11 {
			want = 429
		}
		if resp.StatusCode != want || (want == 429) != (resp.Header.Get("Retry-After") != "") {
			t.Fatalf("call %d: %d %v, want %d", i, resp.StatusCode, resp.Header, want)
		}
		if want == 200 && !strings.Contains(resp.Header.Get("RateLimit"), ";r=") {
			t.Fatalf("call %d: no RateLimit header: %v", i, resp.Header)
		}
	}

	// A second copy on the same address fails before it says it listens.
	busy := proctest.Start(t, bin, "ratelimited-api-busy", "-rlnode", n.HTTPAddr, "-listen", listen)
	if code := busy.Wait(15 * time.Second); code == 0 || strings.Contains(busy.Output(), "listening on") ||
		!strings.Contains(busy.Output(), "listen on --listen "+listen) {
		t.Fatalf("second example on a busy address: exit %d\n%s", code, busy.Output())
	}
}
