package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/cli"
	"github.com/rlnode/rlnode/tlsconf"
)

// runTLS dispatches `rlnode tls SUBCOMMAND`; init is the only one.
func runTLS(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(stdout, "usage: rlnode tls init --out DIR --nodes n1,n2,n3 [--hosts HOST,...]")
		fmt.Fprintln(stdout, "\n  init   write a CA and certificates for each node and for clients")
		if len(args) == 0 {
			return usageErr("tls needs a subcommand: init")
		}
		return flag.ErrHelp
	}
	if args[0] != "init" {
		return usageErr("unknown tls subcommand %q (want init)", args[0])
	}
	return runTLSInit(args[1:], stdout, stderr)
}

func runTLSInit(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tls init", flag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintln(w, "usage: rlnode tls init --out DIR --nodes n1,n2,n3 [--hosts HOST,...] [--valid DURATION]")
		fmt.Fprintln(w, "\nWrites ca.pem and ca-key.pem (kept if DIR already has them, so running it again re-issues")
		fmt.Fprintln(w, "node certificates under the same CA), NAME.pem and NAME-key.pem per node (server and client")
		fmt.Fprintln(w, "certificate, valid for NAME, localhost, 127.0.0.1, ::1 and --hosts, and naming node NAME in the")
		fmt.Fprintln(w, "URI SAN spiffe://rlnode/node/NAME that node-to-node ports require), and client.pem and")
		fmt.Fprintln(w, "client-key.pem for the admin CLI and applications (no node name: refused on node-to-node ports).")
		fmt.Fprintln(w, "Takes no positional arguments.")
		fs.PrintDefaults()
	}
	var o tlsconf.InitOptions
	var nodes, hosts string
	fs.StringVar(&o.Dir, "out", "", "directory to write the files into (required)")
	fs.StringVar(&nodes, "nodes", "", "comma-separated node names, e.g. n1,n2,n3 (required)")
	fs.StringVar(&hosts, "hosts", "", "comma-separated extra host names or IPs every node certificate is valid for")
	fs.DurationVar(&o.Valid, "valid", 365*24*time.Hour, "how long node and client certificates are valid")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErr("tls init takes no arguments, got %q", fs.Args())
	}
	o.Nodes, o.Hosts = splitList(nodes), splitList(hosts)
	if o.Dir == "" || len(o.Nodes) == 0 {
		return usageErr("tls init needs --out DIR and --nodes n1,n2,...")
	}
	files, err := tlsconf.Init(o)
	for _, f := range files {
		fmt.Fprintln(stdout, "wrote", f)
	}
	return err
}
