// Command rlnode runs a node of the rlnode rate limiter (`rlnode serve`, the
// default) and talks to running nodes (peers, status, join, remove,
// transfer-leadership, snapshot, policy, health, bench).
package main

// docs/flags.md is `rlnode serve --help`; TestFlagReference fails when they
// differ, and this rewrites it.
//go:generate go test -run ^TestFlagReference$ . -update-flag-docs

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/cli"
)

type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"serve", "run a node (the default when no command is given)", runServe},
		{"peers", "list the servers of the cluster", runPeers},
		{"status", "show one node's state, term, leader, indexes and windows", runStatus},
		{"join", "add a server to the cluster by hand", runJoin},
		{"remove", "remove a server from the cluster: rlnode remove ID", runRemove},
		{"transfer-leadership", "hand leadership to another server: rlnode transfer-leadership [ID]", runTransfer},
		{"snapshot", "make a node take a Raft snapshot now", runSnapshot},
		{"policy", "the replicated policies: list, get, set, delete, apply -f FILE, import-envoy, sync-envoy", runPolicy},
		{"permit", "concurrency permits: rlnode permit acquire POLICY CLIENT [--ttl D] | release ID | renew ID [--ttl D]", runPermit},
		{"counter", "set a key's used count or count without a limit check: rlnode counter set|inc POLICY CLIENT N", runCounter},
		{"top", "live view of the cluster, policy rates and the most limited clients (q quits; --once prints one table)", runTop},
		{"health", "exit 0 if a node is ready (for container health checks)", runHealth},
		{"backup", "stream a consistent backup from the leader: rlnode backup --out FILE", runBackup},
		{"restore", "load a backup into a new, empty cluster: rlnode restore FILE", runRestore},
		{"recover", "rebuild a stopped node after losing a majority: rlnode recover --data-dir D --peers FILE", runRecover},
		{"migrate-log", "convert a stopped node's Raft log: rlnode migrate-log --data-dir D --to wal|bolt", runMigrateLog},
		{"bench", "load-test nodes and report throughput and latency", runBench},
		{"tls", "write a CA and node/client certificates: rlnode tls init --out DIR --nodes n1,n2,n3", runTLS},
		{"version", "print the version", runVersion},
	}
}

// stopGrace is how long a command other than serve has, after SIGINT or
// SIGTERM cancelled its context, to return by itself before it is ended:
// one stuck where no context reaches (a read of a FIFO, a long parse) must
// still stop when asked. serve shuts down within --shutdown-timeout.
const stopGrace = 3 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	if name, _ := commandName(os.Args[1:]); name != "serve" {
		go exitAfterGrace(ctx, name)
	}
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// exitAfterGrace ends the process stopGrace after ctx is cancelled by a
// signal, with the shell's status for an interrupted command.
func exitAfterGrace(ctx context.Context, name string) {
	<-ctx.Done()
	time.Sleep(stopGrace)
	fmt.Fprintf(os.Stderr, "rlnode %s: interrupted\n", name)
	os.Exit(130)
}

// commandName splits the command's name ("serve" when none is given) from
// its arguments.
func commandName(args []string) (string, []string) {
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		return args[0], args[1:]
	}
	return "serve", args
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 1 && args[0] == "help" {
		args = append(args[1:], "-h") // rlnode help serve is rlnode serve -h
	} else if len(args) > 0 && (args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
		usage(stdout)
		return 0
	}
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		fmt.Fprintln(stdout, versionString())
		return 0
	}
	name, args := commandName(args)
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
		if c.name != name {
			continue
		}
		err := c.run(ctx, args, stdout, stderr)
		var ue *cli.UsageError
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.As(err, &ue):
			fmt.Fprintf(stderr, "rlnode %s: %v\n", name, err)
			if ue.Hint != "" {
				fmt.Fprintln(stderr, ue.Hint)
			}
			return 2
		default:
			fmt.Fprintf(stderr, "rlnode %s: %v\n", name, err)
			return 1
		}
	}
	msg := fmt.Sprintf("rlnode: unknown command %q", name)
	if s := cli.Suggest(name, names); s != "" {
		msg += fmt.Sprintf(" (did you mean %s?)", s)
	}
	fmt.Fprintf(stderr, "%s\n%s\nsee `rlnode help` for the commands\n", msg, usageLine)
	return 2
}

const usageLine = "usage: rlnode [command] [flags]   (rlnode COMMAND -h for a command's flags)"

func usage(w io.Writer) {
	fmt.Fprintln(w, usageLine)
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-20s %s\n", c.name, c.summary)
	}
}

// usageErr reports a flag or argument problem: exit status 2.
func usageErr(format string, args ...any) error {
	return cli.Errorf(format, args...)
}

// pickVerb reads the verb of a command with verbs (`rlnode permit
// acquire|release|renew`): args[0] when it is one of them; else "" and
// usage printed, to stdout with a nil error for -h, --help or help, to
// stderr with a usage error naming the verbs otherwise.
func pickVerb(args []string, usage string, stdout, stderr io.Writer, verbs ...string) (string, error) {
	if len(args) > 0 && slices.Contains(verbs, args[0]) {
		return args[0], nil
	}
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprintln(stdout, usage)
		return "", nil
	}
	fmt.Fprintln(stderr, usage)
	last := len(verbs) - 1
	return "", usageErr("want %s or %s", strings.Join(verbs[:last], ", "), verbs[last])
}

// splitList is a comma-separated flag's items, trimmed, empty ones dropped.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// setUsage makes --help name the command's positional arguments ("" for
// none) before listing its flags.
func setUsage(fs *flag.FlagSet, name, args string) {
	fs.Usage = func() {
		w := fs.Output()
		if args == "" {
			fmt.Fprintf(w, "usage: rlnode %s [flags]   (no positional arguments)\n\nflags:\n", name)
		} else {
			fmt.Fprintf(w, "usage: rlnode %s [flags] %s\n\nflags:\n", name, args)
		}
		fs.VisitAll(func(f *flag.Flag) { printFlag(w, f) })
	}
}
