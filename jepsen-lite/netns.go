package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// chainName is the iptables chain the runner owns inside every node
// namespace. INPUT and OUTPUT jump to it, so a partition is "fill the chain
// with DROP rules" and a heal is "flush the chain", without ever touching
// rules someone else put there.
const chainName = "JEPSEN_LITE"

// stateDir records which runs own which resources, so a later run can reap
// the leftovers of a runner that was killed with SIGKILL (no deferred
// cleanup ran) without ever touching a live run's network.
const stateDir = "/run/jepsen-lite"

var runNameRE = regexp.MustCompile(`^[a-z0-9]{1,8}$`)

// netNames are the kernel object names of one run. Interface names are
// limited to 15 bytes, hence the short run name.
type netNames struct {
	run    string
	bridge string
	ns     []string
	veth   []string // root-namespace end of each node's veth pair
}

func namesFor(run string, nodes int) netNames {
	nn := netNames{run: run, bridge: "jl-" + run + "-br"}
	for i := range nodes {
		nn.ns = append(nn.ns, fmt.Sprintf("jl-%s-n%d", run, i+1))
		nn.veth = append(nn.veth, fmt.Sprintf("jl-%s-v%d", run, i+1))
	}
	return nn
}

// network is one run's bridge, namespaces and veth pairs.
type network struct {
	names   netNames
	prefix  string // first three octets, e.g. "10.77.23"
	hostIP  string // the bridge's address in the root namespace
	nodeIPs []string
	fwdRule []string // root FORWARD rule that lets bridged node traffic pass, nil if none added
	log     *logger
}

// runCmd runs a command and folds its output into the error, because "exit
// status 2" alone says nothing about why ip or iptables refused.
func runCmd(ctx context.Context, stdin []byte, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// netnsUnavailable says why namespaces cannot be used here, or "" if they
// can (as far as can be told without creating one).
func netnsUnavailable() string {
	if os.Geteuid() != 0 {
		return "not running as root (network namespaces need CAP_NET_ADMIN)"
	}
	for _, tool := range []string{"ip", "iptables", "iptables-restore"} {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " not found in PATH (apt-get install -y iproute2 iptables)"
		}
	}
	return ""
}

// setupNetwork creates the bridge, one namespace per node and the veth
// pairs, and prepares the partition chain in every namespace. Leftovers of
// the same run name are deleted first, so a re-run with --name is safe. On
// error everything created so far is torn down.
func setupNetwork(ctx context.Context, run string, nodes int, log *logger) (_ *network, err error) {
	nn := namesFor(run, nodes)
	teardownNames(nn, log)
	n := &network{names: nn, log: log}
	defer func() {
		if err != nil {
			n.teardown()
		}
	}()
	if err := registerRun(run); err != nil {
		return nil, err
	}
	if _, err := runCmd(ctx, nil, "ip", "netns", "add", nn.ns[0]); err != nil {
		return nil, fmt.Errorf("create network namespace: %w", err)
	}
	prefix, err := pickSubnet(run)
	if err != nil {
		return nil, err
	}
	n.prefix, n.hostIP = prefix, prefix+".1"
	steps := [][]string{
		{"link", "add", nn.bridge, "type", "bridge"},
		{"addr", "add", n.hostIP + "/24", "dev", nn.bridge},
		{"link", "set", nn.bridge, "up"},
	}
	for i := range nodes {
		ip := fmt.Sprintf("%s.%d", prefix, 11+i)
		n.nodeIPs = append(n.nodeIPs, ip)
		ns := nn.ns[i]
		if i > 0 {
			steps = append(steps, []string{"netns", "add", ns})
		}
		steps = append(steps,
			[]string{"link", "add", nn.veth[i], "type", "veth", "peer", "name", "eth0", "netns", ns},
			[]string{"link", "set", nn.veth[i], "master", nn.bridge, "up"},
			[]string{"-n", ns, "link", "set", "lo", "up"},
			[]string{"-n", ns, "addr", "add", ip + "/24", "dev", "eth0"},
			[]string{"-n", ns, "link", "set", "eth0", "up"},
		)
	}
	for _, s := range steps {
		if _, err := runCmd(ctx, nil, "ip", s...); err != nil {
			return nil, fmt.Errorf("set up network: %w", err)
		}
	}
	if err := n.allowBridgeForwarding(ctx); err != nil {
		return nil, err
	}
	for _, ns := range nn.ns {
		for _, args := range [][]string{
			{"-N", chainName},
			{"-I", "INPUT", "-j", chainName},
			{"-I", "OUTPUT", "-j", chainName},
		} {
			if _, err := runCmd(ctx, nil, "ip", append([]string{"netns", "exec", ns, "iptables"}, args...)...); err != nil {
				return nil, fmt.Errorf("prepare partition chain in %s: %w", ns, err)
			}
		}
	}
	return n, nil
}

// allowBridgeForwarding adds a root-namespace FORWARD accept for traffic
// between ports of our bridge. With br_netfilter loaded and
// bridge-nf-call-iptables=1 (Docker hosts), bridged frames traverse the
// root FORWARD chain, whose policy is often DROP: without this the nodes
// could not reach each other at all. The rule carries the run name so
// teardown (or a later run reaping leftovers) deletes exactly it.
func (n *network) allowBridgeForwarding(ctx context.Context) error {
	b, err := os.ReadFile("/proc/sys/net/bridge/bridge-nf-call-iptables")
	if err != nil || strings.TrimSpace(string(b)) != "1" {
		return nil // bridged traffic does not go through iptables here
	}
	rule := forwardRule(n.names)
	if _, err := runCmd(ctx, nil, "iptables", append([]string{"-I"}, rule...)...); err != nil {
		return fmt.Errorf("allow forwarding on %s (bridge-nf-call-iptables=1): %w", n.names.bridge, err)
	}
	n.fwdRule = rule
	return nil
}

func forwardRule(nn netNames) []string {
	return []string{"FORWARD", "-i", nn.bridge, "-o", nn.bridge,
		"-m", "comment", "--comment", "jepsen-lite:" + nn.run, "-j", "ACCEPT"}
}

// pickSubnet chooses 10.77.X.0/24 for the run, starting from a hash of the
// run name so concurrent runs usually differ, and skipping any /24 that
// already has an address or route on this host.
func pickSubnet(run string) (string, error) {
	used := map[string]bool{}
	ifaces, _ := net.InterfaceAddrs()
	for _, a := range ifaces {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			ip := ipn.IP.To4()
			used[fmt.Sprintf("%d.%d.%d", ip[0], ip[1], ip[2])] = true
		}
	}
	if out, err := exec.Command("ip", "-4", "route", "show").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			if _, ipn, err := net.ParseCIDR(f[0]); err == nil {
				ip := ipn.IP.To4()
				used[fmt.Sprintf("%d.%d.%d", ip[0], ip[1], ip[2])] = true
			}
		}
	}
	h := fnv.New32a()
	h.Write([]byte(run))
	start := int(h.Sum32() % 250)
	for k := range 250 {
		p := fmt.Sprintf("10.77.%d", 1+(start+k)%250)
		if !used[p] {
			return p, nil
		}
	}
	return "", errors.New("no free 10.77.X.0/24 subnet")
}

// partition installs g: for every node, DROP rules (both directions) for
// each peer it must not reach, replacing whatever partition was there.
// iptables-restore --noflush swaps one node's rules in one transaction, and
// the nodes are done in parallel, so the partition forms at one moment
// rather than link by link.
func (n *network) partition(ctx context.Context, g grudge) error {
	var wg sync.WaitGroup
	errs := make([]error, len(n.names.ns))
	for i, ns := range n.names.ns {
		var b strings.Builder
		b.WriteString("*filter\n:" + chainName + " - [0:0]\n-F " + chainName + "\n")
		for _, j := range g[i] {
			fmt.Fprintf(&b, "-A %s -s %s/32 -j DROP\n", chainName, n.nodeIPs[j])
			fmt.Fprintf(&b, "-A %s -d %s/32 -j DROP\n", chainName, n.nodeIPs[j])
		}
		b.WriteString("COMMIT\n")
		wg.Go(func() {
			_, errs[i] = runCmd(ctx, []byte(b.String()), "ip", "netns", "exec", ns, "iptables-restore", "--noflush")
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// heal removes every partition rule. It uses a fresh context on purpose:
// healing must happen even while the run is being cancelled.
func (n *network) heal() error {
	return n.partition(context.Background(), grudge{})
}

// teardown removes everything the run created. It is safe to call more
// than once and on a half-built network.
func (n *network) teardown() {
	teardownNames(n.names, n.log)
}

// teardownNames deletes a run's namespaces (killing anything still inside
// them), veths, bridge and root FORWARD rule, ignoring what is not there.
func teardownNames(nn netNames, log *logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	existing := map[string]bool{}
	if out, err := runCmd(ctx, nil, "ip", "netns", "list"); err == nil {
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 0 {
				existing[f[0]] = true
			}
		}
	}
	removed := 0
	for _, ns := range nn.ns {
		if !existing[ns] {
			continue
		}
		// A namespace outlives "ip netns del" while processes hold it, and
		// a node left running would keep its ports and data dir busy.
		if out, err := runCmd(ctx, nil, "ip", "netns", "pids", ns); err == nil {
			for _, f := range strings.Fields(out) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if _, err := runCmd(ctx, nil, "ip", "netns", "del", ns); err != nil && log != nil {
			log.Printf("teardown: %v", err)
		}
		removed++
	}
	for _, v := range nn.veth {
		if _, err := net.InterfaceByName(v); err == nil {
			_, _ = runCmd(ctx, nil, "ip", "link", "del", v)
			removed++
		}
	}
	if _, err := net.InterfaceByName(nn.bridge); err == nil {
		if _, err := runCmd(ctx, nil, "ip", "link", "del", nn.bridge); err != nil && log != nil {
			log.Printf("teardown: %v", err)
		}
		removed++
	}
	// Delete every copy of the rule (a crashed run might have added it
	// twice); -D fails once none is left.
	if _, err := exec.LookPath("iptables"); err == nil {
		for range 10 {
			if _, err := runCmd(ctx, nil, "iptables", append([]string{"-D"}, forwardRule(nn)...)...); err != nil {
				break
			}
			removed++
		}
	}
	_ = os.Remove(filepath.Join(stateDir, nn.run+".pid"))
	if removed > 0 && log != nil {
		log.Printf("network of run %q torn down (%d objects removed)", nn.run, removed)
	}
}

// registerRun notes this process as the owner of run's resources.
func registerRun(run string) error {
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", stateDir, err)
	}
	body := fmt.Sprintf("%d\n", os.Getpid())
	if err := os.WriteFile(filepath.Join(stateDir, run+".pid"), []byte(body), 0o644); err != nil {
		return fmt.Errorf("register run: %w", err)
	}
	return nil
}

// reapStaleRuns tears down the networks of runs whose runner process is
// gone (killed before its deferred cleanup could run). Live runs are left
// alone. It returns the names it reaped.
func reapStaleRuns(maxNodes int, log *logger) []string {
	entries, err := os.ReadDir(stateDir)
	if err != nil {
		return nil
	}
	var reaped []string
	for _, e := range entries {
		run, ok := strings.CutSuffix(e.Name(), ".pid")
		if !ok || !runNameRE.MatchString(run) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(stateDir, e.Name()))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err == nil && pid > 0 && alive(pid) {
			continue // still running (or the pid was reused: err on the side of leaving it)
		}
		log.Printf("reaping leftovers of dead run %q (runner pid %d is gone)", run, pid)
		teardownNames(namesFor(run, maxNodes), log)
		reaped = append(reaped, run)
	}
	return reaped
}

// alive reports whether pid is a live process; a zombie (killed, not yet
// reaped by its parent) is dead for this purpose.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true // cannot tell: leave it alone
	}
	// The state follows the parenthesized command name, which may itself
	// contain spaces or parentheses.
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
		return b[i+2] != 'Z'
	}
	return true
}
