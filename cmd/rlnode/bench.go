package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"strings"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/bench"
	"github.com/rlnode/rlnode/cmd/rlnode/internal/cli"
)

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, jsonOut, err := bench.ParseArgs(args, stdout)
	var ue *cli.UsageError
	if errors.Is(err, flag.ErrHelp) || errors.As(err, &ue) {
		return err
	}
	if err != nil {
		// ParseArgs says "bench: ..."; main already names the command.
		return usageErr("%s", strings.TrimPrefix(err.Error(), "bench: "))
	}
	if f, ok := stderr.(*os.File); ok && isTerminal(f) {
		cfg.Progress = stderr
	}
	res, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if jsonOut {
		return res.WriteJSON(stdout)
	}
	return res.WriteTable(stdout)
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
