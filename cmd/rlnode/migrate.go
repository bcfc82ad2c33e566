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

// runMigrateLog converts a stopped node's Raft log between bolt and wal.
func runMigrateLog(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("migrate-log", flag.ContinueOnError)
	fs.SetOutput(stdout)
	setUsage(fs, "migrate-log", "")
	dir := fs.String("data-dir", "", "data dir of a STOPPED node")
	to := fs.String("to", "", "the log store to convert to: wal or bolt")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected arguments %q", fs.Args())
	}
	kind, err := storage.ParseKind(*to)
	if err != nil || kind == "" {
		return usageErr("--to %q: want wal or bolt", *to)
	}
	if *dir == "" {
		return usageErr("--data-dir is required")
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "migrate-log", Level: hclog.Warn, Output: stderr})
	res, err := storage.Migrate(ctx, *dir, kind, logger)
	if err != nil {
		return fmt.Errorf("convert %s to %s: %w", *dir, kind, err)
	}
	fmt.Fprintf(stdout, "converted %s from %s to %s: %s\n", *dir, res.From, res.To, res.Log)
	fmt.Fprintf(stdout, "verified: the new log has the same first and last index, last term and digest as the old one\n")
	fmt.Fprintf(stdout, "the old log is kept at %s; remove it once the node runs well\n", res.Backup)
	return nil
}
