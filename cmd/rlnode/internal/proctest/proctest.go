// Package proctest runs real rlnode processes for tests: it builds the
// binary, picks free ports, starts, signals and restarts processes, and
// speaks their HTTP API. Tests share it instead of copying setup.
package proctest

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster/clustertest"
)

// Build compiles ./cmd/rlnode into dir and returns the binary's path.
func Build(dir string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return BuildFrom(root, filepath.Join(dir, "rlnode"))
}

// BuildFrom compiles ./cmd/rlnode of the source tree src (this module or
// another release's) into bin, with extra go build flags (-tags, -ldflags).
func BuildFrom(src, bin string, flags ...string) (string, error) {
	args := append(append([]string{"build", "-o", bin}, flags...), "./cmd/rlnode")
	cmd := exec.Command("go", args...)
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build in %s: %w\n%s", src, err, out)
	}
	return bin, nil
}

// RepoRoot is the directory of the module's go.mod.
func RepoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
}

// FreeAddr returns a 127.0.0.1 address with a port nothing listens on now
// and that this test binary has not handed out before. The kernel may give
// a port it just gave to a closed listener again, and two nodes told the
// same port lose a race for it (one fails with "address already in use"),
// so the ports already handed out are remembered until the binary exits.
func FreeAddr(t testing.TB) string {
	t.Helper()
	handedOut.mu.Lock()
	defer handedOut.mu.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	// Listeners of ports already handed out stay open until a new one is
	// found, so the kernel moves on instead of offering them again.
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
		if port := l.Addr().(*net.TCPAddr).Port; !handedOut.ports[port] {
			handedOut.ports[port] = true
			return l.Addr().String()
		}
	}
	t.Fatal("no loopback port that was not handed out already")
	return ""
}

// handedOut is the ports FreeAddr gave out in this test binary. It is
// shared by every test on purpose: a port must be unique across them.
var handedOut struct {
	mu    sync.Mutex
	ports map[int]bool
}

// Proc is one running rlnode process.
type Proc struct {
	t    testing.TB
	Bin  string
	Args []string
	Name string
	Log  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start runs `bin args...`, logging to a file in the test's temp dir. The
// process is killed when the test ends.
func Start(t testing.TB, bin, name string, args ...string) *Proc {
	t.Helper()
	p := &Proc{t: t, Bin: bin, Args: args, Name: name, Log: filepath.Join(t.TempDir(), name+".log")}
	p.start()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			b, _ := os.ReadFile(p.Log)
			t.Logf("---- log of %s ----\n%s", p.Name, tail(string(b), 60))
		}
	})
	return p
}

func tail(s string, lines int) string {
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

func (p *Proc) start() {
	p.t.Helper()
	f, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		p.t.Fatalf("start %s: %v", p.Name, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done, p.err = cmd, done, nil
	p.mu.Unlock()
	note(p.t, "started %s", p.Name)
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
}

// Restart starts the process again with the same arguments.
func (p *Proc) Restart() {
	p.t.Helper()
	p.start()
}

// Pid is the process id.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// Kill sends SIGKILL (a crash) and waits for the process to exit.
func (p *Proc) Kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	select {
	case <-done:
		return
	default:
	}
	cmd.Process.Kill()
	<-done
	note(p.t, "killed %s", p.Name)
}

// Signal sends sig and waits up to timeout for the exit; it returns the
// exit code (-1 if it did not exit).
func (p *Proc) Signal(sig syscall.Signal, timeout time.Duration) int {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	cmd.Process.Signal(sig)
	note(p.t, "sent %s to %s", sig, p.Name)
	select {
	case <-done:
		return cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		return -1
	}
}

// Wait waits for the process to exit by itself and returns its exit code.
func (p *Proc) Wait(timeout time.Duration) int {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	select {
	case <-done:
		return cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		return -1
	}
}

// Output returns what the process has logged so far.
func (p *Proc) Output() string {
	b, _ := os.ReadFile(p.Log)
	return string(b)
}

// Node is an rlnode serve process with its addresses.
type Node struct {
	*Proc
	ID, HTTPAddr, RaftAddr, DataDir string
	// TLS, when set, is the client configuration the harness reaches the
	// node's HTTP API with (over https); set it right after StartNode.
	TLS *tls.Config
}

// URL is the node's HTTP base URL.
func (n *Node) URL() string {
	if n.TLS != nil {
		return "https://" + n.HTTPAddr
	}
	return "http://" + n.HTTPAddr
}

// Do performs a request on the node (path is e.g. "/v1/status"), over TLS
// when n.TLS is set.
func (n *Node) Do(method, path, token string, body any) (Response, error) {
	c := client
	if n.TLS != nil {
		c = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: n.TLS, DisableKeepAlives: true}}
	}
	return DoWith(c, method, n.URL()+path, token, body)
}

// StartNode starts `rlnode serve` on free ports with a data dir in the test's
// temp dir; extra flags are appended.
func StartNode(t testing.TB, bin, id string, extra ...string) *Node {
	t.Helper()
	return StartNodeIn(t, bin, id, filepath.Join(t.TempDir(), id), extra...)
}

// StartNodeIn is StartNode on a given data dir (e.g. one unpacked from a
// fixture).
func StartNodeIn(t testing.TB, bin, id, dataDir string, extra ...string) *Node {
	t.Helper()
	n := &Node{ID: id, HTTPAddr: FreeAddr(t), RaftAddr: FreeAddr(t), DataDir: dataDir}
	args := append([]string{"serve", "--id", id, "--http-addr", n.HTTPAddr, "--raft-addr", n.RaftAddr, "--data-dir", n.DataDir}, extra...)
	n.Proc = Start(t, bin, id, args...)
	return n
}

// StartSymmetric starts n nodes at once, each with --bootstrap-expect n and
// the same --join list of all n; it does not wait for them.
func StartSymmetric(t testing.TB, bin string, n int, extra ...string) []*Node {
	t.Helper()
	nodes := make([]*Node, n)
	var urls []string
	for i := range nodes {
		id := fmt.Sprintf("n%d", i+1)
		nodes[i] = &Node{ID: id, HTTPAddr: FreeAddr(t), RaftAddr: FreeAddr(t), DataDir: filepath.Join(t.TempDir(), id)}
		urls = append(urls, nodes[i].URL())
	}
	for _, nd := range nodes {
		args := append([]string{"serve", "--id", nd.ID, "--http-addr", nd.HTTPAddr, "--raft-addr", nd.RaftAddr, "--data-dir", nd.DataDir,
			"--bootstrap-expect", fmt.Sprint(n), "--join", strings.Join(urls, ",")}, extra...)
		nd.Proc = Start(t, bin, nd.ID, args...)
	}
	return nodes
}

// StartCluster starts n nodes: the first bootstraps, the rest --join it. It
// waits until all are ready.
func StartCluster(t testing.TB, bin string, n int, extra ...string) []*Node {
	t.Helper()
	nodes := []*Node{StartNode(t, bin, "n1", extra...)}
	WaitReady(t, nodes[0], 15*time.Second)
	for i := 2; i <= n; i++ {
		nodes = append(nodes, StartNode(t, bin, fmt.Sprintf("n%d", i), append([]string{"--join", nodes[0].URL()}, extra...)...))
	}
	for _, nd := range nodes {
		WaitReady(t, nd, 15*time.Second)
	}
	WaitVoters(t, nodes[0], n, 20*time.Second)
	return nodes
}

// WaitVoters waits until n's view of the configuration has want voters
// (joined servers start as non-voters and are promoted once caught up).
func WaitVoters(t testing.TB, n *Node, want int, timeout time.Duration) {
	t.Helper()
	note(t, "waiting for %d voters on %s", want, n.ID)
	Poll(t, timeout, func() error {
		r, err := Get(n.URL() + "/v1/cluster/peers")
		if err != nil {
			return err
		}
		var ps []struct {
			ID    string `json:"id"`
			Voter bool   `json:"voter"`
		}
		if err := json.Unmarshal(r.Raw, &ps); err != nil {
			return fmt.Errorf("peers: %w: %s", err, r.Raw)
		}
		voters := 0
		for _, p := range ps {
			if p.Voter {
				voters++
			}
		}
		if voters != want {
			return fmt.Errorf("%d voters, want %d: %s", voters, want, r.Raw)
		}
		return nil
	})
}

// Response is an HTTP answer with its JSON body decoded.
type Response struct {
	Status int
	Header http.Header
	JSON   map[string]any
	Raw    []byte
}

// Num returns a numeric JSON field.
func (r Response) Num(k string) int64 {
	f, _ := r.JSON[k].(float64)
	return int64(f)
}

var client = &http.Client{Timeout: 10 * time.Second}

// Get performs GET url; a transport error is returned, not fatal, so tests
// can poll through failovers.
func Get(url string) (Response, error) {
	return Do("GET", url, "", nil)
}

// Do performs a request with an optional bearer token and JSON body.
func Do(method, url, token string, body any) (Response, error) {
	return DoWith(client, method, url, token, body)
}

// DoWith is Do with a given HTTP client (e.g. one presenting a certificate).
func DoWith(c *http.Client, method, url, token string, body any) (Response, error) {
	raw, err := jsonBody(body)
	if err != nil {
		return Response{}, err
	}
	return DoRawWith(c, method, url, token, raw)
}

// DoHeader is Do with extra request headers (e.g. If-Match).
func DoHeader(method, url, token string, hdr http.Header, body any) (Response, error) {
	raw, err := jsonBody(body)
	if err != nil {
		return Response{}, err
	}
	return doRequest(client, method, url, token, hdr, raw)
}

// jsonBody is body as JSON, or nil (no body) for a nil body.
func jsonBody(body any) ([]byte, error) {
	if body == nil {
		return nil, nil
	}
	return json.Marshal(body)
}

// DoRaw performs a request with an optional bearer token and a body sent as
// is (nil: none), so tests can send malformed input.
func DoRaw(method, url, token string, body []byte) (Response, error) {
	return DoRawWith(client, method, url, token, body)
}

// DoRawWith is DoRaw with a given HTTP client.
func DoRawWith(c *http.Client, method, url, token string, body []byte) (Response, error) {
	return doRequest(c, method, url, token, nil, body)
}

func doRequest(c *http.Client, method, url, token string, hdr http.Header, body []byte) (Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return Response{}, err
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	r := Response{Status: resp.StatusCode, Header: resp.Header}
	r.Raw, _ = io.ReadAll(resp.Body)
	if len(r.Raw) > 0 && (r.Raw[0] == '{') {
		json.Unmarshal(r.Raw, &r.JSON)
	}
	return r, nil
}

// MustGet is Get that fails the test on a transport error.
func MustGet(t testing.TB, url string) Response {
	t.Helper()
	r, err := Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return r
}

// Poll retries cond until it returns nil or timeout passes, then fails the
// test with cond's last error. It is the in-process harness's Poll, shared.
func Poll(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	clustertest.Poll(t, timeout, cond)
}

// WaitReady waits for GET /readyz to answer 200.
func WaitReady(t testing.TB, n *Node, timeout time.Duration) {
	t.Helper()
	note(t, "waiting for %s to be ready", n.ID)
	Poll(t, timeout, func() error {
		r, err := n.Do("GET", "/readyz", "", nil)
		if err != nil {
			return fmt.Errorf("%s: %w", n.ID, err)
		}
		if r.Status != 200 {
			return fmt.Errorf("%s not ready: %s", n.ID, r.Raw)
		}
		return nil
	})
}

// Status reads GET /v1/status.
func Status(n *Node) (map[string]any, error) {
	r, err := n.Do("GET", "/v1/status", "", nil)
	if err != nil {
		return nil, err
	}
	if r.Status != 200 {
		return nil, fmt.Errorf("status %d: %s", r.Status, r.Raw)
	}
	return r.JSON, nil
}

// Run runs the binary as a command (e.g. an admin command) and returns its
// stdout, stderr and exit code.
func Run(t testing.TB, bin string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Env = append(os.Environ(), env...)
	err := cmd.Run()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return out.String(), errb.String(), ee.ExitCode()
		}
		t.Fatalf("run %v: %v", args, err)
	}
	return out.String(), errb.String(), 0
}

// TLSInit runs `rlnode tls init --out dir --nodes ...`: a CA, one
// certificate per node and client.pem for clients.
func TLSInit(t testing.TB, bin, dir string, nodes ...string) {
	t.Helper()
	if out, stderr, code := Run(t, bin, nil, "tls", "init", "--out", dir, "--nodes", strings.Join(nodes, ",")); code != 0 {
		t.Fatalf("tls init: exit %d\n%s%s", code, out, stderr)
	}
}

// TLSFlags are the serve flags for node id with certificates from TLSInit.
func TLSFlags(dir, id string) []string {
	return []string{"--tls-cert", filepath.Join(dir, id+".pem"), "--tls-key", filepath.Join(dir, id+"-key.pem"), "--tls-ca", filepath.Join(dir, "ca.pem")}
}

// ClientTLS is the client configuration of an application trusting
// TLSInit's CA, presenting client.pem when withCert.
func ClientTLS(t testing.TB, dir string, withCert bool) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	b, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil || !pool.AppendCertsFromPEM(b) {
		t.Fatalf("read CA in %s: %v", dir, err)
	}
	c := &tls.Config{RootCAs: pool}
	if withCert {
		kp, err := tls.LoadX509KeyPair(filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{kp}
	}
	return c
}
