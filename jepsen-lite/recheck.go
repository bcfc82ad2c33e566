package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/rlnode/rlnode/jepsen-lite/checker"
)

// recheck runs the checker again over a finished run's history.jsonl, with
// the policies and flags its summary.json recorded: a changed checker is
// tried on the history that made it complain, without running the cluster
// again.
func recheck(dir string, timeout time.Duration, stdout io.Writer) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		return exitUsage, fmt.Errorf("recheck: %w", err)
	}
	var sum struct {
		Run struct {
			Flags struct {
				Limit  int64  `json:"limit"`
				Window string `json:"window"`
				Skew   string `json:"skew"`
			} `json:"flags"`
		} `json:"run"`
		Policies map[string]checker.Policy `json:"policies"`
		Faults   []faultRecord             `json:"faults"`
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		return exitUsage, fmt.Errorf("recheck: summary.json: %w", err)
	}
	window, err := time.ParseDuration(sum.Run.Flags.Window)
	if err != nil {
		return exitUsage, fmt.Errorf("recheck: summary.json: run.flags.window: %w", err)
	}
	recs, err := readHistory(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		return exitUsage, err
	}
	cfg := checker.Config{Limit: sum.Run.Flags.Limit, WindowMs: window.Milliseconds(), Timeout: timeout, Policies: sum.Policies}
	if skew, err := time.ParseDuration(sum.Run.Flags.Skew); err == nil {
		cfg.ClockJumps = clockJumps(sum.Faults, skew)
	}
	hist := checkerHistory(recs)
	res := checker.Check(cfg, hist)
	for _, v := range res.Violations {
		fmt.Fprintf(stdout, "violation %s key %s: %s\n", v.Check, v.Key, v.Detail)
	}
	if !res.Valid {
		fmt.Fprintf(stdout, "jepsen-lite recheck: INVALID %d ops of %s, %d violation(s)\n", len(hist), dir, len(res.Violations))
		return exitInvalid, nil
	}
	fmt.Fprintf(stdout, "jepsen-lite recheck: VALID %d ops of %s\n", len(hist), dir)
	return exitValid, nil
}

func readHistory(path string) ([]opRecord, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("recheck: %w", err)
	}
	defer f.Close()
	var recs []opRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for line := 1; sc.Scan(); line++ {
		var r opRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("recheck: %s line %d: %w", path, line, err)
		}
		recs = append(recs, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("recheck: %s: %w", path, err)
	}
	return recs, nil
}
