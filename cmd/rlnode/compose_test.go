package main

// TestComposeCluster runs the top-level docker-compose.yml for real: it builds
// the image with scripts/build-image.sh, starts the three-node cluster under a
// throwaway Compose project on free loopback ports, checks that the nodes
// share one budget, kills the leader's container, checks that the survivors
// carry on with the window intact, restarts the container and checks that it
// catches up. It needs a Docker daemon and docker-compose (v1) or docker
// compose (v2); without them, without RLNODE_LONG_TESTS=1 (a long test), or with
// RLNODE_SKIP_DOCKER=1 it is skipped. RLNODE_COMPOSE="docker compose" (or a path) picks the Compose
// command. Everything it creates is removed afterwards, also on failure.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
	"github.com/rlnode/rlnode/internal/testprog"
)

func TestComposeCluster(t *testing.T) {
	if os.Getenv("RLNODE_SKIP_DOCKER") == "1" {
		t.Skip("RLNODE_SKIP_DOCKER=1: skipping the Docker Compose cluster test")
	}
	proctest.Long(t) // it builds an image and runs three containers
	compose := composeCommand(t)
	root := composeRepoRoot(t)
	start := time.Now()
	project := "rlnodetest" + composeRandHex(4)
	token := composeRandHex(16)
	const limit = 10 // RLNODE_LIMIT below; the window is 60s so it cannot lapse mid-test
	t.Logf("compose command %q, project %s", strings.Join(compose, " "), project)

	composeBuildImage(t, root, project)
	t.Logf("built the image in %s", time.Since(start).Round(100*time.Millisecond))

	ports := composeFreePorts(t, 3)
	env := []string{
		"RLNODE_IMAGE=" + project + ":latest",
		"RLNODE_PUBLISH_HOST=127.0.0.1",
		fmt.Sprintf("RLNODE_LIMIT=%d", limit),
		"RLNODE_WINDOW=60s",
		"RLNODE_LOG_LEVEL=info",
		"RLNODE_CLUSTER_TOKEN=" + token,
	}
	for i, p := range ports {
		env = append(env, fmt.Sprintf("RLNODE_N%d_PORT=%d", i+1, p))
	}
	c := &composeProject{t: t, cmd: compose, project: project, file: filepath.Join(root, "docker-compose.yml"), env: env}
	t.Cleanup(c.teardown)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := c.run(ctx, "up", "-d"); err != nil {
		t.Fatalf("compose up: %v\n%s", err, out)
	}

	// All three ready and members.
	services := []string{"n1", "n2", "n3"}
	upAt := time.Now()
	composeEventually(t, 60*time.Second, "all three nodes ready and voters", func() error {
		for i, p := range ports {
			if code, _, err := composeGet(ctx, p, "/readyz", nil); err != nil || code != 200 {
				return fmt.Errorf("%s /readyz: %d %v", services[i], code, err)
			}
		}
		var peers []struct {
			ID    string `json:"id"`
			Voter bool   `json:"voter"`
		}
		if _, err := composeGetJSON(ctx, ports[0], "/v1/cluster/peers", &peers); err != nil {
			return err
		}
		var voters []string
		for _, p := range peers {
			if p.Voter {
				voters = append(voters, p.ID)
			}
		}
		slices.Sort(voters)
		if !slices.Equal(voters, services) {
			return fmt.Errorf("voters %v", voters)
		}
		return nil
	})
	t.Logf("cluster ready %s after up", time.Since(upAt).Round(100*time.Millisecond))

	// The token reached the nodes through the environment: admin endpoints
	// refuse a request without it.
	for i, p := range ports {
		code, body, err := composeDo(ctx, http.MethodPost, p, "/v1/cluster/snapshot", nil)
		if err != nil || code != http.StatusUnauthorized {
			t.Errorf("%s: POST /v1/cluster/snapshot without token: %d %v %s, want 401 (RLNODE_CLUSTER_TOKEN not passed through?)", services[i], code, err, body)
		}
	}
	// The image has no shell, but exec of the binary works, and the admin
	// command inside the container sees every peer.
	if out, err := c.run(ctx, "exec", "-T", "n1", "/rlnode", "peers", "--json"); err != nil {
		t.Errorf("exec n1 /rlnode peers: %v\n%s", err, out)
	} else {
		var rows []struct {
			ID        string `json:"id"`
			Leader    bool   `json:"leader"`
			Reachable bool   `json:"reachable"`
		}
		if err := json.Unmarshal(composeJSONPart(out), &rows); err != nil || len(rows) != 3 {
			t.Errorf("exec n1 /rlnode peers --json: %v, %d rows\n%s", err, len(rows), out)
		}
		for _, r := range rows {
			if !r.Reachable {
				t.Errorf("rlnode peers inside n1: %s unreachable\n%s", r.ID, out)
			}
		}
	}

	// One budget, whichever node takes the hit.
	spent := "alice-" + composeRandHex(4)
	firstHit := time.Now()
	for i := 0; i < limit; i++ {
		r := composeHit(t, ctx, ports[i%3], spent, 10*time.Second, false)
		if r.status != 200 || !r.Allowed || r.Remaining != int64(limit-1-i) {
			t.Fatalf("hit %d via %s: %d allowed=%v remaining=%d, want 200 remaining=%d\n%s",
				i+1, services[i%3], r.status, r.Allowed, r.Remaining, limit-1-i, r.body)
		}
	}
	r := composeHit(t, ctx, ports[limit%3], spent, 10*time.Second, false)
	if r.status != 429 || r.Allowed || r.Remaining != 0 || r.retryAfter == "" {
		t.Fatalf("hit %d via %s: %d allowed=%v remaining=%d Retry-After=%q, want 429\n%s",
			limit+1, services[limit%3], r.status, r.Allowed, r.Remaining, r.retryAfter, r.body)
	}

	// Find the leader; every node must agree.
	var leader string
	composeEventually(t, 15*time.Second, "nodes agree on a leader", func() error {
		ids := map[string]bool{}
		for _, p := range ports {
			var st composeStatus
			if _, err := composeGetJSON(ctx, p, "/v1/status", &st); err != nil {
				return err
			}
			ids[st.LeaderID] = true
			leader = st.LeaderID
		}
		if len(ids) != 1 || !slices.Contains(services, leader) {
			return fmt.Errorf("leaders reported: %v", ids)
		}
		return nil
	})
	li := slices.Index(services, leader)
	var survivors []int
	for i := range services {
		if i != li {
			survivors = append(survivors, i)
		}
	}
	out, err := c.run(ctx, "ps", "-q", leader)
	cid := strings.TrimSpace(string(out))
	if err != nil || cid == "" || strings.ContainsAny(cid, " \n") {
		t.Fatalf("compose ps -q %s: %v %q", leader, err, out)
	}
	if out, err := composeRun(ctx, nil, "docker", "kill", cid); err != nil {
		t.Fatalf("docker kill %s (%s): %v\n%s", leader, cid, err, out)
	}
	killedAt := time.Now()
	t.Logf("killed leader %s (container %.12s)", leader, cid)

	// The survivors keep the window: the spent client stays refused, a fresh
	// one is served.
	r = composeHit(t, ctx, ports[survivors[0]], spent, 20*time.Second, true)
	if r.status != 429 {
		t.Fatalf("after killing %s: spent client via %s: %d, want 429 (window lost?)\n%s", leader, services[survivors[0]], r.status, r.body)
	}
	fresh := "bob-" + composeRandHex(4)
	r = composeHit(t, ctx, ports[survivors[1]], fresh, 20*time.Second, true)
	if r.status != 200 || !r.Allowed {
		t.Fatalf("after killing %s: fresh client via %s: %d, want 200\n%s", leader, services[survivors[1]], r.status, r.body)
	}
	// 1, unless an earlier attempt got outcome_unknown and did count; the
	// remaining count of this answer says either way.
	freshUsed := int64(limit) - r.Remaining
	failover := time.Since(killedAt)
	t.Logf("survivors %s and %s served again %s after the kill (served by %s)",
		services[survivors[0]], services[survivors[1]], failover.Round(10*time.Millisecond), r.servedBy)
	if failover > 15*time.Second {
		t.Errorf("failover took %s, want a few seconds", failover)
	}
	if st := composeNodeStatus(t, ctx, ports[survivors[0]]); st.LeaderID == leader || st.LeaderID == "" {
		t.Errorf("after the kill %s reports leader %q", services[survivors[0]], st.LeaderID)
	}

	// Bring the old leader back: it must catch up from the others.
	if out, err := composeRun(ctx, nil, "docker", "start", cid); err != nil {
		t.Fatalf("docker start %s: %v\n%s", leader, err, out)
	}
	restartAt := time.Now()
	composeEventually(t, 60*time.Second, leader+" ready again", func() error {
		if code, body, err := composeGet(ctx, ports[li], "/readyz", nil); err != nil || code != 200 {
			return fmt.Errorf("/readyz: %d %v %s", code, err, body)
		}
		return nil
	})
	var back, other composeStatus
	composeEventually(t, 30*time.Second, leader+" caught up", func() error {
		if _, err := composeGetJSON(ctx, ports[survivors[0]], "/v1/status", &other); err != nil {
			return err
		}
		if _, err := composeGetJSON(ctx, ports[li], "/v1/status", &back); err != nil {
			return err
		}
		if back.AppliedIndex != other.AppliedIndex || back.DigestIndex != other.DigestIndex {
			return fmt.Errorf("%s applied %d (digest at %d), %s applied %d (digest at %d)",
				leader, back.AppliedIndex, back.DigestIndex, services[survivors[0]], other.AppliedIndex, other.DigestIndex)
		}
		return nil
	})
	if back.Digest != other.Digest {
		t.Errorf("state diverged at index %d: %s digest %s, %s digest %s", back.DigestIndex, leader, back.Digest, services[survivors[0]], other.Digest)
	}
	t.Logf("%s caught up %s after docker start: applied %d, digest %s", leader,
		time.Since(restartAt).Round(100*time.Millisecond), back.AppliedIndex, back.Digest)

	// Its own (stale, local) view of the windows matches.
	if d := time.Since(firstHit); d > 55*time.Second {
		t.Fatalf("the test took %s since the first hit: the 60s window may have lapsed, so the counts below cannot be checked", d.Round(time.Second))
	}
	for _, want := range []struct {
		client string
		used   int64
	}{{spent, limit}, {fresh, freshUsed}} {
		var peek struct {
			Used     int64  `json:"used"`
			Active   bool   `json:"active"`
			ServedBy string `json:"servedBy"`
		}
		code, err := composeGetJSON(ctx, ports[li], "/v1/status/"+want.client+"?stale=true", &peek)
		if err != nil || code != 200 || peek.Used != want.used || !peek.Active {
			t.Errorf("%s: stale peek of %s: %d %v used=%d active=%v, want used=%d active", leader, want.client, code, err, peek.Used, peek.Active, want.used)
		}
	}
	r = composeHit(t, ctx, ports[li], spent, 10*time.Second, false)
	if r.status != 429 {
		t.Errorf("spent client via restarted %s: %d, want 429\n%s", leader, r.status, r.body)
	}
	t.Logf("total %s", time.Since(start).Round(100*time.Millisecond))
}

// composeBuildImage builds the image with scripts/build-image.sh under
// the project's name, so a test neither needs nor overwrites the user's
// rlnode:latest, and removes it when the test ends.
func composeBuildImage(t *testing.T, root, project string) {
	t.Helper()
	for _, tool := range []string{"bash", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found in PATH: needed to build the image with scripts/build-image.sh", tool)
		}
	}
	build := exec.Command("bash", filepath.Join(root, "scripts", "build-image.sh"))
	build.Dir = root
	build.Env = append(os.Environ(), "IMAGE="+project)
	var buildErr bytes.Buffer
	build.Stderr = &buildErr
	out, err := build.Output()
	lines := strings.Fields(string(out))
	if err != nil || len(lines) == 0 {
		t.Fatalf("scripts/build-image.sh: %v\n%s%s", err, buildErr.String(), out)
	}
	images := []string{project + ":latest", lines[len(lines)-1]}
	// A new user's next step after building: the token Compose needs.
	if !strings.Contains(buildErr.String(), "next: scripts/compose-env.sh") {
		t.Errorf("scripts/build-image.sh does not point at scripts/compose-env.sh:\n%s", buildErr.String())
	}
	t.Cleanup(func() {
		_, _ = composeRun(context.Background(), nil, "docker", append([]string{"image", "rm", "-f"}, images...)...)
	})
}

// composeProject runs Compose for one throwaway project.
type composeProject struct {
	t       *testing.T
	cmd     []string
	project string
	file    string
	env     []string
}

func (c *composeProject) run(ctx context.Context, args ...string) ([]byte, error) {
	full := append(append(slices.Clone(c.cmd[1:]), "-p", c.project, "-f", c.file), args...)
	return composeRun(ctx, c.env, c.cmd[0], full...)
}

// teardown dumps the logs when the test failed, then removes the project's
// containers, network and volumes, whatever state it is in.
func (c *composeProject) teardown() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if c.t.Failed() {
		out, _ := c.run(ctx, "ps")
		c.t.Logf("compose ps:\n%s", out)
		out, _ = c.run(ctx, "logs", "--no-color", "--timestamps", "--tail=300")
		c.t.Logf("compose logs:\n%s", out)
	}
	if out, err := c.run(ctx, "down", "-v", "--remove-orphans", "-t", "15"); err != nil {
		c.t.Errorf("compose down -v: %v\n%s", err, out)
	}
	// Belt and braces: anything still labelled with the project.
	filter := "label=com.docker.compose.project=" + c.project
	for _, kind := range [][]string{{"container", "rm", "-fv"}, {"volume", "rm", "-f"}, {"network", "rm"}} {
		listArgs := []string{kind[0], "ls", "-q", "--filter", filter}
		if kind[0] == "container" {
			listArgs = append(listArgs, "-a")
		}
		out, err := composeRun(ctx, nil, "docker", listArgs...)
		if ids := strings.Fields(string(out)); err == nil && len(ids) > 0 {
			c.t.Logf("removing leftover %ss %v", kind[0], ids)
			if out, err := composeRun(ctx, nil, "docker", append(kind, ids...)...); err != nil {
				c.t.Errorf("docker %s: %v\n%s", strings.Join(kind, " "), err, out)
			}
		}
	}
}

// composeCommand finds a working Compose CLI or skips the test.
func composeCommand(t *testing.T) []string {
	t.Helper()
	testprog.Need(t, "docker", "install Docker and Compose")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := composeRun(ctx, nil, "docker", "info", "--format", "{{.ServerVersion}}"); err != nil {
		testprog.Missing(t, "a Docker daemon", "start dockerd", fmt.Sprintf("docker info failed: %v: %s", err, bytes.TrimSpace(out)))
	}
	try := func(cmd []string) bool {
		if _, err := exec.LookPath(cmd[0]); err != nil {
			return false
		}
		_, err := composeRun(ctx, nil, cmd[0], append(slices.Clone(cmd[1:]), "version")...)
		return err == nil
	}
	if s := strings.Fields(os.Getenv("RLNODE_COMPOSE")); len(s) > 0 {
		if !try(s) {
			t.Fatalf("RLNODE_COMPOSE=%q: %s version failed", os.Getenv("RLNODE_COMPOSE"), strings.Join(s, " "))
		}
		return s
	}
	for _, cmd := range [][]string{{"docker", "compose"}, {"docker-compose"}} {
		if try(cmd) {
			return cmd
		}
	}
	testprog.Missing(t, "docker compose", "install the Compose plugin or docker-compose", "neither `docker compose` nor `docker-compose` works")
	return nil
}

func composeRepoRoot(t *testing.T) string {
	t.Helper()
	root, err := proctest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"docker-compose.yml", "Dockerfile", "scripts/build-image.sh"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Fatalf("repository root %s: %v", root, err)
		}
	}
	return root
}

// composeRun runs a command with extra environment and returns its combined
// output.
func composeRun(ctx context.Context, env []string, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = os.Environ()
	// The test names its compose file and project itself.
	cmd.Env = slices.DeleteFunc(cmd.Env, func(kv string) bool {
		return strings.HasPrefix(kv, "COMPOSE_FILE=") || strings.HasPrefix(kv, "COMPOSE_PROJECT_NAME=")
	})
	cmd.Env = append(cmd.Env, env...)
	cmd.WaitDelay = 5 * time.Second
	return cmd.CombinedOutput()
}

// composeFreePorts picks n distinct free TCP ports on 127.0.0.1.
func composeFreePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

func composeRandHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// composeEventually retries f until it succeeds or the timeout passes.
func composeEventually(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	proctest.Poll(t, timeout, func() error {
		if err := f(); err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		return nil
	})
}

var composeHTTP = &http.Client{Timeout: 5 * time.Second}

func composeDo(ctx context.Context, method string, port int, path string, body io.Reader) (int, []byte, error) {
	return composeRequest(ctx, method, port, path, body, nil)
}

func composeGet(ctx context.Context, port int, path string, hdr *http.Header) (int, []byte, error) {
	return composeRequest(ctx, http.MethodGet, port, path, nil, hdr)
}

// composeRequest sends one request to a published port; hdr, if set,
// receives the response headers.
func composeRequest(ctx context.Context, method string, port int, path string, body io.Reader, hdr *http.Header) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, fmt.Sprintf("http://127.0.0.1:%d%s", port, path), body)
	if err != nil {
		return 0, nil, err
	}
	resp, err := composeHTTP.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	if hdr != nil {
		*hdr = resp.Header
	}
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func composeGetJSON(ctx context.Context, port int, path string, out any) (int, error) {
	code, b, err := composeGet(ctx, port, path, nil)
	if err != nil {
		return code, err
	}
	if code != 200 {
		return code, fmt.Errorf("GET %s: %d %s", path, code, b)
	}
	return code, json.Unmarshal(b, out)
}

type composeStatus struct {
	ID           string `json:"id"`
	State        string `json:"state"`
	LeaderID     string `json:"leaderId"`
	AppliedIndex uint64 `json:"appliedIndex"`
	Digest       string `json:"digest"`
	DigestIndex  uint64 `json:"digestIndex"`
}

func composeNodeStatus(t *testing.T, ctx context.Context, port int) composeStatus {
	t.Helper()
	var st composeStatus
	if _, err := composeGetJSON(ctx, port, "/v1/status", &st); err != nil {
		t.Fatalf("GET /v1/status on port %d: %v", port, err)
	}
	return st
}

type composeCheck struct {
	status     int
	body       []byte
	retryAfter string
	servedBy   string
	Allowed    bool   `json:"allowed"`
	Remaining  int64  `json:"remaining"`
	Code       string `json:"code"`
}

// composeHit makes one hit. It retries (until timeout) when the hit certainly
// did not count: a connection error, or 503 no_leader/not_counted; and, with
// retryUnknown, on 503 outcome_unknown too (for callers that read the count
// from the final answer rather than assume it). Any other answer is returned.
func composeHit(t *testing.T, ctx context.Context, port int, client string, timeout time.Duration, retryUnknown bool) composeCheck {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var hdr http.Header
		code, b, err := composeGet(ctx, port, "/check/"+client, &hdr)
		var r composeCheck
		if err == nil {
			r = composeCheck{status: code, body: b, retryAfter: hdr.Get("Retry-After"), servedBy: hdr.Get("X-Rlnode-Served-By")}
			if jerr := json.Unmarshal(b, &r); jerr != nil {
				err = fmt.Errorf("decode %d answer %q: %w", code, b, jerr)
			}
		}
		if err == nil && (code != 503 || (r.Code == "outcome_unknown" && !retryUnknown)) {
			return r
		}
		if err == nil {
			err = fmt.Errorf("%d %s", code, b)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("GET 127.0.0.1:%d/check/%s: no usable answer within %s: %v", port, client, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// composeJSONPart drops anything Compose printed before the JSON document.
func composeJSONPart(b []byte) []byte {
	if i := bytes.IndexAny(b, "[{"); i >= 0 {
		return b[i:]
	}
	return b
}
