package main

import (
	"fmt"
	"os"
	"testing"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
	"github.com/rlnode/rlnode/internal/testprog"
)

// rlnodeBin is the binary built once for this package's process tests.
var rlnodeBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rlnode-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rlnodeBin, err = proctest.Build(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	stop := proctest.PackageHeartbeat("cmd/rlnode")
	code := m.Run()
	stop()
	testprog.Report()
	if line := proctest.LongSkippedLine("cmd/rlnode"); line != "" {
		testprog.Say(line)
	}
	os.RemoveAll(dir)
	os.Exit(code)
}
