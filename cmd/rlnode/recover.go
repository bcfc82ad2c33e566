package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/hashicorp/go-hclog"

	"github.com/rlnode/rlnode/cluster/storage"
	"github.com/rlnode/rlnode/cmd/rlnode/internal/cli"
)

func runRecover(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("recover", flag.ContinueOnError)
	fs.SetOutput(stdout)
	setUsage(fs, "recover", "--data-dir D --peers FILE")
	dir := fs.String("data-dir", "", "data dir of a STOPPED node that survived")
	peersFile := fs.String("peers", "", `JSON file listing every surviving server: [{"id":"n1","raftAddr":"10.0.0.1:8300"}, ...]`)
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 || *dir == "" || *peersFile == "" {
		return usageErr("recover needs --data-dir and --peers: rlnode recover --data-dir D --peers FILE (on every survivor, with the node stopped)")
	}
	peers, err := storage.ReadRecoverPeers(*peersFile)
	if err != nil {
		return usageErr("%v", err)
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "recover", Level: hclog.Warn, Output: stderr})
	if err := storage.Recover(*dir, peers, logger); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "recovered %s: its configuration is now the %d server(s) in %s.\n", *dir, len(peers), *peersFile)
	fmt.Fprintf(stdout, "Recover every survivor with the same file, then start them; add new members with --join.\n")
	return nil
}
