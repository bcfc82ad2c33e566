// Package clustertest runs real rlnode nodes in one test process: real TCP on
// 127.0.0.1:0, real Bolt files in t.TempDir(), the nodes' own internal
// endpoints plus whatever public API the test mounts (Options.API;
// httpapi/apitest mounts the real one), fast Raft timeouts, raft logs routed
// to t.Log, and a fault layer that can cut every link of a node (Raft and
// HTTP) and heal it.
package clustertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/trace"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/cluster/storage"
	"github.com/rlnode/rlnode/cluster/transport"
	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/policy"
)

// FastTiming keeps elections well under a second. 150 ms rather than raft's
// test 50 ms: at 50 ms a loaded 2-core CI machine saw leaders step down
// mid-test ("failed to contact quorum") and hits answered outcome_unknown.
var FastTiming = cluster.Timing{Heartbeat: 150 * time.Millisecond, Election: 150 * time.Millisecond, LeaderLease: 150 * time.Millisecond, Commit: 5 * time.Millisecond}

// Options shape every node of a harness cluster.
type Options struct {
	Limit             int64
	Window            time.Duration
	SnapshotThreshold uint64
	TrailingLogs      uint64
	SnapshotInterval  time.Duration
	Token             string
	// Policies are seeded beside the fixed-window default of Limit per
	// Window.
	Policies []policy.Policy
	// RaftLog is the nodes' log store; "" means $RLNODE_RAFT_LOG, so CI can
	// run the same tests on both kinds.
	RaftLog storage.Kind
	// WrapPeer, when set, wraps each node's transport to other nodes' HTTP
	// APIs (e.g. to tamper with one node's forwarded requests).
	WrapPeer func(from string, rt http.RoundTripper) http.RoundTripper
	// API, when set, builds the public HTTP API each node serves beside
	// its internal endpoints (token is Options.Token). Without it a node
	// serves only the internal endpoints.
	API func(node *cluster.Node, token string, logger hclog.Logger) http.Handler
	// MaxClockOffset is the nodes' clock discipline bound (0: default);
	// tests of a deliberately skewed leader lift it.
	MaxClockOffset time.Duration
	// Formats, by node id ("n3"), is the log format a node reports from
	// its first start (Node.Format); others report the current one.
	Formats map[string]fsm.Format
	// TracerProvider, when set, traces the nodes (cluster.Config's).
	TracerProvider trace.TracerProvider
}

func (o *Options) defaults() {
	if o.RaftLog == "" {
		o.RaftLog = storage.Kind(os.Getenv("RLNODE_RAFT_LOG"))
	}
	if o.Limit == 0 {
		o.Limit = 5
	}
	if o.Window == 0 {
		o.Window = time.Minute
	}
}

// Cluster is a set of in-process nodes.
type Cluster struct {
	t     testing.TB
	opts  Options
	dir   string // parent of the nodes' data dirs
	mu    sync.Mutex
	Nodes []*Node
	// cut holds the ids of isolated nodes; links to or from them fail.
	cut map[string]bool
	// byAddr maps Raft and HTTP addresses to node ids for the fault layer.
	byAddr map[string]string
	// conns are the open connections touching each node.
	conns map[string]map[net.Conn]struct{}
}

// Node is one in-process node with its HTTP API served on real TCP.
type Node struct {
	*cluster.Node
	ID       string
	Dir      string
	RaftAddr string
	HTTPAddr string
	// ClockOffset is applied when the node (re)starts.
	ClockOffset time.Duration
	// Format, when set, is the log format the node reports when it
	// (re)starts: an older one stands in for a node of an older release
	// in tests of the version gate.
	Format fsm.Format

	c      *Cluster
	stream *faultStream
	srv    *http.Server
	httpLn net.Listener
	up     bool
}

// New makes an empty cluster; Start or AddNode add members.
func New(t testing.TB, opts Options) *Cluster {
	opts.defaults()
	// The data dirs' parent is made before Close is registered: cleanups run
	// last-first, so the nodes stop before their files are removed (a
	// TempDir made later is removed while a node may still be writing a
	// snapshot into it).
	c := &Cluster{t: t, opts: opts, cut: map[string]bool{}, byAddr: map[string]string{}, dir: t.TempDir()}
	t.Cleanup(c.Close)
	return c
}

// Start makes an n-node cluster: the first node bootstraps, the others join
// through it, and it waits until every node is ready.
func Start(t testing.TB, n int, opts Options) *Cluster {
	c := New(t, opts)
	c.AddNode(true)
	for i := 1; i < n; i++ {
		c.AddNode(false)
	}
	c.WaitReady(10 * time.Second)
	return c
}

// AddNode starts a new node with a fresh data dir. Unless bootstrap is set it
// joins the cluster through the first live node.
func (c *Cluster) AddNode(bootstrap bool) *Node {
	c.t.Helper()
	n := c.StartNode(bootstrap)
	if !bootstrap {
		c.Join(n)
	}
	return n
}

// StartNode starts a new node with a fresh data dir (bootstrapping a
// one-node cluster if told to) and does not join it: a test that expects
// the join to be refused asks itself.
func (c *Cluster) StartNode(bootstrap bool) *Node {
	c.t.Helper()
	c.mu.Lock()
	id := fmt.Sprintf("n%d", len(c.Nodes)+1)
	c.mu.Unlock()
	n := &Node{ID: id, Dir: filepath.Join(c.dir, id), c: c, Format: c.opts.Formats[id]}
	n.start(bootstrap)
	c.mu.Lock()
	c.Nodes = append(c.Nodes, n)
	c.mu.Unlock()
	return n
}

// Join asks the cluster (through any live node) to add n.
func (c *Cluster) Join(n *Node) {
	c.t.Helper()
	var via []string
	for _, o := range c.Live() {
		if o != n {
			via = append(via, "http://"+o.HTTPAddr)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	// Joined servers start as non-voters; wait for the promotion, as a
	// real node does.
	err := n.Node.JoinAndWait(ctx, via, cluster.JoinRequest{ID: n.ID, RaftAddr: n.RaftAddr, HTTPAddr: n.HTTPAddr}, func(string, ...any) {})
	if err != nil {
		c.t.Fatalf("join %s: %v", n.ID, err)
	}
}

func (n *Node) start(bootstrap bool) {
	c := n.c
	c.t.Helper()
	raftAddr, httpAddr := n.RaftAddr, n.HTTPAddr
	if raftAddr == "" {
		raftAddr = "127.0.0.1:0"
	}
	if httpAddr == "" {
		httpAddr = "127.0.0.1:0"
	}
	inner, err := transport.ListenTCP(raftAddr, raftAddr)
	if err != nil {
		c.t.Fatalf("%s: %v", n.ID, err)
	}
	n.stream = &faultStream{StreamLayer: inner, c: c, id: n.ID}
	n.RaftAddr = inner.Addr().String()
	ln, err := net.Listen("tcp", httpAddr)
	if err != nil {
		c.t.Fatalf("%s: listen http: %v", n.ID, err)
	}
	n.httpLn = &faultListener{Listener: ln, c: c, id: n.ID}
	n.HTTPAddr = ln.Addr().String()
	c.mu.Lock()
	c.byAddr[n.RaftAddr], c.byAddr[n.HTTPAddr] = n.ID, n.ID
	c.mu.Unlock()

	logger := hclog.New(&hclog.LoggerOptions{Name: n.ID, Level: hclog.Warn, Output: testWriter{c.t}})
	node, err := cluster.Open(cluster.Config{
		ID: n.ID, RaftBind: n.RaftAddr, HTTPAdvertise: n.HTTPAddr, DataDir: n.Dir, RaftLog: c.opts.RaftLog, Bootstrap: bootstrap,
		Seed:              append([]policy.Policy{policy.Fixed(policy.Default, c.opts.Limit, c.opts.Window)}, c.opts.Policies...),
		SnapshotThreshold: c.opts.SnapshotThreshold, TrailingLogs: c.opts.TrailingLogs, SnapshotInterval: c.opts.SnapshotInterval,
		Timing: FastTiming, ApplyTimeout: 2 * time.Second, ClusterToken: c.opts.Token, ClockOffset: n.ClockOffset, Format: n.Format, MaxClockOffset: c.opts.MaxClockOffset,
		Logger: logger, Stream: n.stream, PeerTransport: c.peerTransport(n.ID), TracerProvider: c.opts.TracerProvider,
	})
	if err != nil {
		c.t.Fatalf("open %s: %v", n.ID, err)
	}
	n.Node = node
	public := http.NotFoundHandler()
	if c.opts.API != nil {
		public = c.opts.API(node, c.opts.Token, logger)
	}
	n.srv = &http.Server{Handler: node.Mount(public), ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: logger.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})}
	go n.srv.Serve(n.httpLn)
	n.up = true
}

// Stop shuts the node down (HTTP, then Raft, then Bolt), keeping its data.
func (n *Node) Stop() {
	n.c.t.Helper()
	if !n.up {
		return
	}
	n.up = false
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n.srv.Shutdown(ctx)
	if err := n.Node.Close(); err != nil {
		n.c.t.Logf("close %s: %v", n.ID, err)
	}
}

// Restart starts a stopped node again on the same data dir and addresses.
func (n *Node) Restart() {
	n.c.t.Helper()
	n.start(false)
}

// Up reports whether the node is running.
func (n *Node) Up() bool { return n.up }

// URL is the node's HTTP base URL.
func (n *Node) URL() string { return "http://" + n.HTTPAddr }

// Close stops every node.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		n.Stop()
	}
}

// Live returns the running nodes.
func (c *Cluster) Live() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*Node
	for _, n := range c.Nodes {
		if n.up {
			out = append(out, n)
		}
	}
	return out
}

// Isolate cuts every Raft and HTTP link of n, as a network partition would.
func (c *Cluster) Isolate(n *Node) {
	c.mu.Lock()
	c.cut[n.ID] = true
	conns := c.conns[n.ID]
	delete(c.conns, n.ID)
	c.mu.Unlock()
	for conn := range conns {
		conn.Close()
	}
}

// Heal restores every link.
func (c *Cluster) Heal() {
	c.mu.Lock()
	c.cut = map[string]bool{}
	c.mu.Unlock()
}

func (c *Cluster) isCut(a, b string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cut[a] || c.cut[b]
}

func (c *Cluster) idOf(addr string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byAddr[addr]
}

// Poll calls cond until it returns nil or timeout passes, then fails the test
// with cond's last error.
func Poll(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitReady waits until every live node is ready and they agree on a leader.
func (c *Cluster) WaitReady(timeout time.Duration) *Node {
	c.t.Helper()
	var leader *Node
	Poll(c.t, timeout, func() error {
		leader = nil
		var lid string
		for _, n := range c.Live() {
			if err := n.Ready(0); err != nil {
				return fmt.Errorf("%s not ready: %w", n.ID, err)
			}
			id, _ := n.Leader()
			if lid != "" && id != lid {
				return fmt.Errorf("nodes disagree on the leader: %s vs %s", lid, id)
			}
			lid = id
			if n.ID == id {
				leader = n
			}
		}
		if leader == nil {
			return fmt.Errorf("leader %q is not among the live nodes", lid)
		}
		return nil
	})
	return leader
}

// Leader waits for a leader among the live, connected nodes.
func (c *Cluster) Leader(timeout time.Duration) *Node {
	c.t.Helper()
	var leader *Node
	Poll(c.t, timeout, func() error {
		for _, n := range c.Live() {
			if n.IsLeader() && !c.isCut(n.ID, "") {
				if _, err := n.Peek(context.Background(), policy.Default, "leader-probe", false); err == nil {
					leader = n
					return nil
				}
			}
		}
		return errors.New("no leader ready for reads")
	})
	return leader
}

// Followers returns the live nodes other than the leader.
func (c *Cluster) Followers(leader *Node) []*Node {
	var out []*Node
	for _, n := range c.Live() {
		if n != leader {
			out = append(out, n)
		}
	}
	return out
}

// WaitConverged waits until every live node has applied the same index with
// the same state digest.
func (c *Cluster) WaitConverged(timeout time.Duration) {
	c.t.Helper()
	Poll(c.t, timeout, func() error {
		var want cluster.Status
		for i, n := range c.Live() {
			s := n.Status()
			if i == 0 {
				want = s
				continue
			}
			if s.DigestIndex != want.DigestIndex || s.Digest != want.Digest {
				return fmt.Errorf("%s at index %d digest %s; %s at index %d digest %s", n.ID, s.DigestIndex, s.Digest, c.Live()[0].ID, want.DigestIndex, want.Digest)
			}
		}
		return nil
	})
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

var _ io.Writer = testWriter{}

func (c *Cluster) peerTransport(from string) http.RoundTripper {
	if c.opts.WrapPeer != nil {
		return c.opts.WrapPeer(from, c.transport(from))
	}
	return c.transport(from)
}
