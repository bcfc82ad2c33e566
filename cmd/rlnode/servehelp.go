package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// serveFlagGroups orders `rlnode serve -h`: forty flags read best in a few
// named groups, the everyday ones first. Every serve flag belongs to one
// group (TestServeFlagsAreGrouped); docs/flags.md is this help, generated.
var serveFlagGroups = []struct {
	title string
	flags []string
}{
	{"node", []string{"id", "http-addr", "raft-addr", "http-advertise", "raft-advertise", "data-dir", "raft-log",
		"limit", "window", "policies", "headers", "grpc-addr", "config", "log-level", "log-json"}},
	{"envoy rate limit service (with --grpc-addr)", []string{"rls-shadow-mode", "rls-response-headers", "rls-dynamic-metadata", "rls-permit-ttl"}},
	{"envoy rate limit quota service (RLQS, leased policies)", []string{"rlqs-addr", "rlqs-lease", "rlqs-transit", "rlqs-stream-idle", "rlqs-grant-rate", "rlqs-max-buckets", "rlqs-max-buckets-per-credential"}},
	{"regions (global budgets: docs/multi-region.md)", []string{"region", "parent", "parent-token", "region-lease", "region-slice-wait"}},
	{"gubernator's V1 API (limits given per call)", []string{"gubernator-addr", "gubernator-max-keys", "gubernator-max-keys-per-credential"}},
	{"cluster", []string{"join", "bootstrap-expect", "wait-for-join", "join-catchup-timeout", "rejoin-empty",
		"leave-on-shutdown", "max-clock-offset", "max-permit-ttl", "permits-per-credential", "reserved-bytes-per-credential", "reserved-bytes"}},
	{"security", []string{"cluster-token-file", "cluster-token", "tls-cert", "tls-key", "tls-ca", "tls-reload-interval",
		"tls-legacy-node-certs", "insecure", "trusted-proxies", "raft-handshake-timeout", "raft-idle-timeout", "raft-max-conns-per-ip",
		"raft-max-pending", "raft-max-conns", "http-max-conns", "http-max-conns-per-ip", "http-body-budget", "grpc-max-streams-per-conn", "grpc-max-streams",
		"grpc-max-streams-per-credential", "grpc-max-message-size", "rlqs-max-message-size", "grpc-message-timeout", "pprof-addr"}},
	{"tuning", []string{"snapshot-threshold", "snapshot-interval", "trailing-logs", "max-batch", "max-inflight",
		"max-forward-inflight", "lease-hot-hits", "raft-max-rpcs-inflight", "raft-max-append-entries", "raft-batch-apply",
		"raft-heartbeat-timeout", "raft-election-timeout", "raft-lease-timeout", "shutdown-timeout"}},
	{"testing only (never in production)", []string{"debug-endpoints", "debug-clock-offset", "debug-region-ignore-slice-deadline"}},
}

// ungroupedTitle collects flags no group names, so a new flag still shows.
const ungroupedTitle = "other"

func serveUsage(fs *flag.FlagSet) func() {
	return func() {
		w := fs.Output()
		fmt.Fprintln(w, "usage: rlnode serve [flags]   (no positional arguments)")
		fmt.Fprintln(w, "\nRuns a node. Every flag can also be set as $RLNODE_<NAME> (--http-addr is $RLNODE_HTTP_ADDR)")
		fmt.Fprintln(w, "or as a key of the --config YAML file; the command line wins, then the environment, then the file.")
		fmt.Fprintln(w, "OpenTelemetry traces are exported when $OTEL_EXPORTER_OTLP_ENDPOINT is set (docs/observability.md).")
		seen := map[string]bool{}
		for _, g := range serveFlagGroups {
			fmt.Fprintf(w, "\n%s:\n", g.title)
			for _, name := range g.flags {
				if f := fs.Lookup(name); f != nil {
					printFlag(w, f)
					seen[name] = true
				}
			}
		}
		var rest []*flag.Flag
		fs.VisitAll(func(f *flag.Flag) {
			if !seen[f.Name] {
				rest = append(rest, f)
			}
		})
		if len(rest) > 0 {
			fmt.Fprintf(w, "\n%s:\n", ungroupedTitle)
			for _, f := range rest {
				printFlag(w, f)
			}
		}
	}
}

// printFlag prints one flag as the flag package would, with two dashes as
// the docs write them, no value placeholder for a switch, and no default
// for a flag whose default comes from the environment (it may be a secret;
// its usage names the variable instead).
func printFlag(w io.Writer, f *flag.Flag) {
	name, usage := flag.UnquoteUsage(f)
	line := "  --" + f.Name
	if isBool(f) {
		name = ""
	}
	if name != "" {
		line += " " + name
	}
	if len(line) <= 4 {
		line += "\t"
	} else {
		line += "\n    \t"
	}
	line += strings.ReplaceAll(usage, "\n", "\n    \t")
	if !strings.Contains(usage, "(default $") && !slices.Contains([]string{"", "0", "false", "0s"}, f.DefValue) {
		if name == "string" {
			line += fmt.Sprintf(" (default %q)", f.DefValue)
		} else {
			line += fmt.Sprintf(" (default %s)", f.DefValue)
		}
	}
	fmt.Fprintln(w, line)
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}
