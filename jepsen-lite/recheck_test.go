package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/jepsen-lite/checker"
)

// A run directory is checked again from its files: the same history is
// VALID, and with a fourth hit allowed past a limit of three, INVALID.
func TestRecheckJudgesASavedRun(t *testing.T) {
	const t0 = 1_800_000_000_000
	hit := func(id int, allowed bool, remaining int64) opRecord {
		return opRecord{Op: checker.Op{ID: id, Kind: checker.KindHit, Key: "k", Node: "n1",
			Invoke: int64(id) * 10, Return: int64(id)*10 + 5, Outcome: checker.OutcomeOK,
			Allowed: allowed, Remaining: remaining, ResetAt: t0 + 1000,
			Limits: []checker.LimitResult{{Limit: 3, WindowMs: 1000, Remaining: remaining, ResetAt: t0 + 1000, WindowStart: t0}}}}
	}
	write := func(recs ...opRecord) string {
		dir := t.TempDir()
		summary := `{"run":{"flags":{"limit":3,"window":"1s"}}}`
		if err := os.WriteFile(filepath.Join(dir, "summary.json"), []byte(summary), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := writeHistory(filepath.Join(dir, "history.jsonl"), recs); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	valid := []opRecord{hit(1, true, 2), hit(2, true, 1), hit(3, true, 0), hit(4, false, 0)}
	var out bytes.Buffer
	if code, err := recheck(write(valid...), 0, &out); err != nil || code != exitValid || !strings.Contains(out.String(), "VALID 4 ops") {
		t.Fatalf("valid history: exit %d, %v, %q", code, err, out.String())
	}
	out.Reset()
	overAdmitted := append(valid[:3:3], hit(4, true, 0))
	if code, err := recheck(write(overAdmitted...), 0, &out); err != nil || code != exitInvalid || !strings.Contains(out.String(), "violation") {
		t.Fatalf("a fourth hit allowed: exit %d, %v, %q", code, err, out.String())
	}
	if code, err := recheck(t.TempDir(), 0, &out); err == nil || code != exitUsage {
		t.Fatalf("a directory without a run: exit %d, %v", code, err)
	}
}
