package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// nodeSpec is everything needed to (re)start one node the same way.
type nodeSpec struct {
	idx      int
	id       string // n1..nN, also the Raft server id
	ns       string // network namespace; "" on loopback
	httpAddr string // host:port, reachable from the runner
	raftAddr string
	dataDir  string
	logPath  string
	scheme   string   // "https" with TLS; "" means http
	extra    []string // serve flags of this node only (its certificate)
}

func (s nodeSpec) url() string {
	if s.scheme != "" {
		return s.scheme + "://" + s.httpAddr
	}
	return "http://" + s.httpAddr
}

// proc is one incarnation of a node's process.
type proc struct {
	cmd  *exec.Cmd
	pid  int // the rlnode process itself (verified), the target of every signal
	done chan struct{}
	// expected is set before the runner kills or stops the process, so
	// its exit is not mistaken for a crash.
	expected atomic.Bool
	exitErr  error // valid once done is closed
}

// crash is a node process that exited without the runner asking it to.
type crash struct {
	Node  string  `json:"node"`
	At    float64 `json:"at"` // seconds since run start
	Error string  `json:"error"`
	Log   string  `json:"log"`
}

// cluster owns the node processes: it starts them, signals them and reaps
// them. Each live process has one waiter goroutine (started in start) that
// ends when the process exits; stopAll/killAll make sure that happens.
type cluster struct {
	bin    string
	specs  []nodeSpec
	common []string // serve flags every node gets
	log    *logger
	t0     time.Time

	mu      sync.Mutex
	procs   []*proc    // current incarnation per node; nil when not running
	join    [][]string // --join list per node; nil for a node that bootstraps
	paused  []bool
	crashes []crash
	starts  []int // incarnations per node, for log markers
}

func newCluster(bin string, specs []nodeSpec, common []string, log *logger, t0 time.Time) *cluster {
	n := len(specs)
	return &cluster{bin: bin, specs: specs, common: common, log: log, t0: t0,
		procs: make([]*proc, n), join: make([][]string, n), paused: make([]bool, n), starts: make([]int, n)}
}

func (c *cluster) names() []string {
	out := make([]string, len(c.specs))
	for i, s := range c.specs {
		out[i] = s.id
	}
	return out
}

// setJoin sets the --join list node i gets on every later start.
func (c *cluster) setJoin(i int, urls []string) {
	c.mu.Lock()
	c.join[i] = urls
	c.mu.Unlock()
}

// args are the exact serve flags of node i; a restart reuses them, so a
// node with state comes back as itself (rlnode ignores --join then).
func (c *cluster) args(i int) []string {
	s := c.specs[i]
	args := []string{"serve", "--id", s.id, "--http-addr", s.httpAddr, "--raft-addr", s.raftAddr, "--data-dir", s.dataDir}
	args = append(args, c.common...)
	args = append(args, s.extra...)
	c.mu.Lock()
	join := c.join[i]
	c.mu.Unlock()
	if len(join) > 0 {
		args = append(args, "--join", strings.Join(join, ","))
	}
	return args
}

// start launches node i. In a namespace it runs "ip netns exec <ns> rlnode
// serve ...": ip execs in place, so the pid is rlnode's, which start
// verifies (and corrects if some ip version forks instead).
func (c *cluster) start(i int) error {
	s := c.specs[i]
	c.mu.Lock()
	if c.procs[i] != nil {
		c.mu.Unlock()
		return fmt.Errorf("start %s: already running", s.id)
	}
	c.starts[i]++
	incarnation := c.starts[i]
	c.mu.Unlock()

	args := c.args(i)
	var cmd *exec.Cmd
	if s.ns != "" {
		cmd = exec.Command("ip", append([]string{"netns", "exec", s.ns, c.bin}, args...)...)
	} else {
		cmd = exec.Command(c.bin, args...)
	}
	f, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("open log of %s: %w", s.id, err)
	}
	defer f.Close() // the child has its own copy once started
	fmt.Fprintf(f, "\n=== jepsen-lite: start #%d of %s at %s (+%.3fs): %s ===\n",
		incarnation, s.id, time.Now().Format(time.RFC3339Nano), time.Since(c.t0).Seconds(), strings.Join(cmd.Args, " "))
	cmd.Stdout, cmd.Stderr = f, f
	// Own process group: a Ctrl-C in the terminal reaches only the runner,
	// which then tears the cluster down itself. Pdeathsig: if the runner is
	// killed outright, the nodes die with it instead of lingering.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.id, err)
	}
	p := &proc{cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{})}
	// Publish before the waiter starts, so an early exit is seen as this
	// node's crash and clears the table entry.
	c.mu.Lock()
	c.procs[i] = p
	c.paused[i] = false
	c.mu.Unlock()
	go c.wait(i, p)
	pid, err := realPid(cmd.Process.Pid, p.done, c.bin, 3*time.Second)
	if err != nil {
		if q, _ := c.take(i); q == p {
			_ = cmd.Process.Kill()
		}
		<-p.done
		return fmt.Errorf("start %s: %w", s.id, err)
	}
	c.mu.Lock()
	p.pid = pid
	c.mu.Unlock()
	how := "direct"
	if s.ns != "" {
		how = "netns " + s.ns
		if pid == cmd.Process.Pid {
			how += ", ip exec'd in place"
		} else {
			how += fmt.Sprintf(", wrapper pid %d", cmd.Process.Pid)
		}
	}
	c.log.Printf("started %s (pid %d, %s)", s.id, pid, how)
	return nil
}

// wait reaps one process and records it as a crash unless the runner
// caused the exit.
func (c *cluster) wait(i int, p *proc) {
	p.exitErr = p.cmd.Wait()
	close(p.done)
	if p.expected.Load() {
		return
	}
	msg := exitReason(p.exitErr)
	c.mu.Lock()
	if c.procs[i] == p {
		c.procs[i] = nil
	}
	pid := p.pid
	c.crashes = append(c.crashes, crash{Node: c.specs[i].id, At: time.Since(c.t0).Seconds(), Error: msg, Log: c.specs[i].logPath})
	c.mu.Unlock()
	c.log.Loudf("node %s (pid %d) exited on its own: %s (see %s)", c.specs[i].id, pid, msg, c.specs[i].logPath)
}

// exitReason words an exit the runner did not cause. rlnode exits 0 only
// after SIGTERM/SIGINT, so a clean exit means some other process signalled
// it; that still disturbs the run, but it is not a crash of rlnode.
func exitReason(err error) string {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "exited with status 0, i.e. it got SIGTERM/SIGINT, which the runner did not send (another process killing rlnode by name?)"
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Sprintf("killed by %v, which the runner did not send", ws.Signal())
		}
		return fmt.Sprintf("crashed: %v", err)
	default:
		return err.Error()
	}
}

// realPid returns the pid of the rlnode process started as pid: pid itself
// once /proc/<pid>/exe is the rlnode binary, or failing that a child of it
// that is. done is closed when the started process exits.
func realPid(pid int, done <-chan struct{}, bin string, timeout time.Duration) (int, error) {
	want, err := os.Stat(bin)
	if err != nil {
		return 0, fmt.Errorf("stat %s: %w", bin, err)
	}
	isBin := func(pid int) bool {
		fi, err := os.Stat(fmt.Sprintf("/proc/%d/exe", pid))
		return err == nil && os.SameFile(fi, want)
	}
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-done:
			return 0, errors.New("process exited during startup")
		default:
		}
		if isBin(pid) {
			return pid, nil
		}
		for _, child := range children(pid) {
			if isBin(child) {
				return child, nil
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("pid %d never became %s", pid, bin)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// children lists the pids whose parent is ppid.
func children(ppid int) []int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", ppid, ppid))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

func (c *cluster) running(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.procs[i] != nil
}

func (c *cluster) runningNodes() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	for i, p := range c.procs {
		if p != nil {
			out = append(out, i)
		}
	}
	return out
}

// take removes node i's current process from the table so that exactly one
// caller signals and reaps it, and returns it with its rlnode pid.
func (c *cluster) take(i int) (*proc, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.procs[i]
	c.procs[i] = nil
	c.paused[i] = false
	if p == nil {
		return nil, 0
	}
	p.expected.Store(true)
	return p, p.pid
}

// kill sends SIGKILL to node i's rlnode process and waits for it to die.
func (c *cluster) kill(i int) error {
	p, pid := c.take(i)
	if p == nil {
		return fmt.Errorf("kill %s: not running", c.specs[i].id)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %s (pid %d): %w", c.specs[i].id, pid, err)
	}
	return waitDone(p, 10*time.Second, c.specs[i].id)
}

// stop asks node i to shut down (SIGTERM) and kills it if it has not
// exited within grace.
func (c *cluster) stop(i int, grace time.Duration) error {
	p, pid := c.take(i)
	if p == nil {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGCONT) // a stopped process cannot handle SIGTERM
	_ = syscall.Kill(pid, syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	c.log.Printf("%s did not stop within %s of SIGTERM; killing it", c.specs[i].id, grace)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	return waitDone(p, 10*time.Second, c.specs[i].id)
}

func waitDone(p *proc, timeout time.Duration, id string) error {
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("%s still not reaped after %s", id, timeout)
	}
}

// stopAll stops every node in parallel (graceful, then forced).
func (c *cluster) stopAll(grace time.Duration) error {
	var wg sync.WaitGroup
	errs := make([]error, len(c.specs))
	for i := range c.specs {
		wg.Go(func() { errs[i] = c.stop(i, grace) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// killAll is the cleanup path: SIGKILL everything still running.
func (c *cluster) killAll() {
	for i := range c.specs {
		if c.running(i) {
			if err := c.kill(i); err != nil {
				c.log.Printf("cleanup: %v", err)
			}
		}
	}
}

// pause stops node i with SIGSTOP: the process keeps its sockets but
// answers nothing, like a long GC pause or a frozen VM.
func (c *cluster) pause(i int) error { return c.signalPaused(i, syscall.SIGSTOP, true) }

// resume continues a paused node.
func (c *cluster) resume(i int) error { return c.signalPaused(i, syscall.SIGCONT, false) }

func (c *cluster) signalPaused(i int, sig syscall.Signal, paused bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.procs[i]
	if p == nil {
		return fmt.Errorf("%v %s: not running", sig, c.specs[i].id)
	}
	if err := syscall.Kill(p.pid, sig); err != nil {
		return fmt.Errorf("%v %s (pid %d): %w", sig, c.specs[i].id, p.pid, err)
	}
	c.paused[i] = paused
	return nil
}

func (c *cluster) isPaused(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.paused[i]
}

// wipe deletes node i's data dir; the node must not be running.
func (c *cluster) wipe(i int) error {
	if c.running(i) {
		return fmt.Errorf("wipe %s: still running", c.specs[i].id)
	}
	if err := os.RemoveAll(c.specs[i].dataDir); err != nil {
		return fmt.Errorf("wipe %s: %w", c.specs[i].id, err)
	}
	return nil
}

func (c *cluster) crashList() []crash {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]crash(nil), c.crashes...)
}

// waitLive waits until node i answers /livez (its HTTP server is up).
func (c *cluster) waitLive(ctx context.Context, a *admin, i int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if err := a.live(ctx, c.specs[i].url()); err == nil {
			return nil
		}
		if !c.running(i) {
			return fmt.Errorf("%s exited while starting", c.specs[i].id)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not live after %s: %w", c.specs[i].id, timeout, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// logDir is where node logs go.
func logDir(out string) string { return filepath.Join(out, "nodes") }

// bootCluster bootstraps a cluster's first node and joins the others one
// at a time (Raft takes one membership change at a time anyway), then
// waits for a settled cluster.
func bootCluster(ctx context.Context, cl *cluster, adm *admin, log *logger) error {
	specs := cl.specs
	if err := cl.start(0); err != nil {
		return err
	}
	if err := waitNodeReady(ctx, cl, adm, 0, 20*time.Second); err != nil {
		return err
	}
	for i := 1; i < len(specs); i++ {
		cl.setJoin(i, []string{specs[0].url()})
		if err := cl.start(i); err != nil {
			return err
		}
		if err := waitNodeReady(ctx, cl, adm, i, 30*time.Second); err != nil {
			return err
		}
	}
	if err := waitSettled(ctx, cl, adm, 30*time.Second); err != nil {
		return err
	}
	log.Printf("cluster of %d up: %v", len(specs), cl.names())
	return nil
}

func waitNodeReady(ctx context.Context, cl *cluster, adm *admin, i int, timeout time.Duration) error {
	s := cl.specs[i]
	err := retry(ctx, timeout, func() error {
		if !cl.running(i) {
			return retryStop(fmt.Errorf("%s exited during startup (see %s)", s.id, s.logPath))
		}
		return adm.ready(ctx, s.url())
	})
	if err != nil {
		return fmt.Errorf("%s not ready: %w", s.id, err)
	}
	return nil
}
