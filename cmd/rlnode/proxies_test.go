package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
	"github.com/rlnode/rlnode/internal/testprog"
)

// The recipes in docs/proxies/ run here against the real proxies: the
// test copies a recipe, points its addresses (rlnode 127.0.0.1:8080, app
// 127.0.0.1:9000, proxy 127.0.0.1:8000) at free ports, starts the proxy in
// front of a small app and drives it as a user's client would.

// proxyRig is one rlnode node, an app and the addresses a recipe uses.
type proxyRig struct {
	node      *proctest.Node
	app       *httptest.Server
	appCalls  atomic.Int32
	proxyAddr string
	dir       string
}

func newProxyRig(t *testing.T) *proxyRig {
	t.Helper()
	r := &proxyRig{dir: t.TempDir(), proxyAddr: proctest.FreeAddr(t)}
	r.node = proctest.StartNode(t, rlnodeBin, "n1", "--limit", "2", "--window", "1m", "--trusted-proxies", "127.0.0.1/32")
	proctest.WaitReady(t, r.node, 15*time.Second)
	// The app echoes the decision headers it was given.
	r.app = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.appCalls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{"app": "yes", "remaining": req.Header.Get("X-RateLimit-Remaining")})
	}))
	t.Cleanup(r.app.Close)
	return r
}

// recipe reads docs/proxies/name with the rig's addresses in place of the
// documented ones.
func (r *proxyRig) recipe(t *testing.T, name string) string {
	t.Helper()
	root, err := proctest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "docs", "proxies", name))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.NewReplacer(
		"127.0.0.1:8080", r.node.HTTPAddr,
		"127.0.0.1:9000", strings.TrimPrefix(r.app.URL, "http://"),
		"127.0.0.1:8000", r.proxyAddr,
	).Replace(string(b))
	for _, doc := range []string{"127.0.0.1:8080", "127.0.0.1:9000", "127.0.0.1:8000"} {
		if strings.Contains(s, doc) {
			t.Fatalf("%s still mentions %s after substitution", name, doc)
		}
	}
	return s
}

func (r *proxyRig) waitProxy(t *testing.T, p *proctest.Proc) {
	t.Helper()
	proctest.Poll(t, 20*time.Second, func() error {
		if code := p.Wait(0); code != -1 {
			return fmt.Errorf("%s exited with %d:\n%s", p.Name, code, p.Output())
		}
		c, err := net.DialTimeout("tcp", r.proxyAddr, time.Second)
		if err != nil {
			return err
		}
		c.Close()
		return nil
	})
}

type proxied struct {
	status int
	header http.Header
	body   string
}

func (r *proxyRig) get(t *testing.T, apiKey string) proxied {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+r.proxyAddr+"/orders?page=2", nil)
	if apiKey != "" {
		req.Header.Set("X-Api-Key", apiKey)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("GET through the proxy: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return proxied{resp.StatusCode, resp.Header, string(b)}
}

// drive checks the cases every recipe documents.
func (r *proxyRig) drive(t *testing.T, downStatus int) {
	t.Helper()
	for _, want := range []string{"1", "0"} {
		p := r.get(t, "alice")
		if p.status != 200 || !strings.Contains(p.body, `"app":"yes"`) {
			t.Fatalf("under the limit: %d %s", p.status, p.body)
		}
		if !strings.Contains(p.body, `"remaining":"`+want+`"`) {
			t.Fatalf("the app did not get X-RateLimit-Remaining %s: %s", want, p.body)
		}
		if p.header.Get("RateLimit") == "" || p.header.Get("X-RateLimit-Remaining") != want {
			t.Fatalf("client headers under the limit: %v", p.header)
		}
	}
	calls := r.appCalls.Load()
	p := r.get(t, "alice")
	if p.status != 429 || p.header.Get("Retry-After") == "" || p.header.Get("RateLimit") == "" || p.header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("over the limit: %d %v %s", p.status, p.header, p.body)
	}
	if r.appCalls.Load() != calls {
		t.Fatal("the app was called for a refused request")
	}
	if p := r.get(t, "bob"); p.status != 200 {
		t.Fatalf("another key: %d %s", p.status, p.body)
	}
	// No key: the client's fault, refused, never passed on (a proxy that
	// took it for an outage would let it through when failing open).
	calls = r.appCalls.Load()
	if p := r.get(t, ""); p.status != http.StatusUnauthorized || r.appCalls.Load() != calls {
		t.Fatalf("no X-Api-Key: %d %s (app called: %v), want 401 and no call", p.status, p.body, r.appCalls.Load() != calls)
	}
	r.node.Kill()
	p = r.get(t, "carol")
	if p.status != downStatus {
		t.Fatalf("rlnode down: %d %v %s, want %d", p.status, p.header, p.body, downStatus)
	}
	if downStatus == 503 && p.header.Get("Retry-After") == "" {
		t.Fatalf("rlnode down: 503 without Retry-After")
	}
}

func needBinary(t *testing.T, name string) string {
	t.Helper()
	return testprog.Need(t, name, "apt-get install "+name+"; .ci/run installs it")
}

func TestProxyNginx(t *testing.T) {
	bin := needBinary(t, "nginx")
	r := newProxyRig(t)
	conf := r.recipe(t, "nginx.conf")
	// Keep nginx's files in the test's directory (it may not run as root).
	conf = strings.Replace(conf, "http {", fmt.Sprintf(`http {
	access_log off;
	client_body_temp_path %[1]s/body;
	proxy_temp_path %[1]s/proxy;
	fastcgi_temp_path %[1]s/fastcgi;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;`, r.dir), 1)
	path := filepath.Join(r.dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	p := proctest.Start(t, bin, "nginx", "-p", r.dir, "-c", path, "-e", "stderr",
		"-g", fmt.Sprintf("daemon off; master_process off; pid %s/nginx.pid;", r.dir))
	r.waitProxy(t, p)
	r.drive(t, http.StatusServiceUnavailable)
}

func TestProxyCaddy(t *testing.T) {
	bin := needBinary(t, "caddy")
	r := newProxyRig(t)
	path := filepath.Join(r.dir, "Caddyfile")
	// The site address is "http://:8000" (any Host), bound to 127.0.0.1.
	conf := r.recipe(t, "Caddyfile")
	_, port, _ := net.SplitHostPort(r.proxyAddr)
	if !strings.Contains(conf, "http://:8000 {") {
		t.Fatal(`Caddyfile: no site "http://:8000 {"`)
	}
	conf = strings.Replace(conf, "http://:8000 {", "http://:"+port+" {", 1)
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	// Caddy keeps state under $HOME / XDG dirs: point them at the test's.
	p := proctest.Start(t, "/usr/bin/env", "caddy", "HOME="+r.dir, "XDG_DATA_HOME="+r.dir, "XDG_CONFIG_HOME="+r.dir,
		bin, "run", "--config", path, "--adapter", "caddyfile")
	r.waitProxy(t, p)
	// Host localhost reaches rlnode and the app too, not Caddy's empty 200.
	req, _ := http.NewRequest(http.MethodGet, "http://"+r.proxyAddr+"/", nil)
	req.Host = "localhost:" + port
	req.Header.Set("X-Api-Key", "dave")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("RateLimit") == "" || r.appCalls.Load() != 1 {
		t.Fatalf("Host localhost: %d %v (app calls %d)", resp.StatusCode, resp.Header, r.appCalls.Load())
	}
	r.drive(t, http.StatusServiceUnavailable)
}

// Traefik is not packaged by Debian; set RLNODE_TRAEFIK to a traefik v3
// binary (e.g. go install github.com/traefik/traefik/v3/cmd/traefik@latest)
// to run its recipe.
func TestProxyTraefik(t *testing.T) {
	bin := os.Getenv("RLNODE_TRAEFIK")
	if bin == "" {
		t.Skip("RLNODE_TRAEFIK is not set: skipping the Traefik recipe (Traefik is not in Debian; build it with go install github.com/traefik/traefik/v3/cmd/traefik@latest)")
	}
	r := newProxyRig(t)
	dyn := filepath.Join(r.dir, "traefik-dynamic.yml")
	static := strings.Replace(r.recipe(t, "traefik.yml"), "filename: traefik-dynamic.yml", "filename: "+dyn, 1)
	for name, body := range map[string]string{"traefik.yml": static, "traefik-dynamic.yml": r.recipe(t, "traefik-dynamic.yml")} {
		if err := os.WriteFile(filepath.Join(r.dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := proctest.Start(t, bin, "traefik", "--configFile="+filepath.Join(r.dir, "traefik.yml"))
	r.waitProxy(t, p)
	r.drive(t, http.StatusInternalServerError)
}
