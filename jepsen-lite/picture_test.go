//go:build plots

package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rlnode/rlnode/jepsen-lite/checker"
)

func TestWritePicture(t *testing.T) {
	// The picture is for people, but it must at least render without error
	// for a small history with every outcome and fault family.
	var recs []opRecord
	for i := range 200 {
		s := float64(i) / 10
		r := hit(s, s+0.003, []checker.Outcome{checker.OutcomeOK, checker.OutcomeUnknown, outcomeFail}[i%3])
		r.Allowed = i%6 == 0
		recs = append(recs, r)
	}
	faults := []faultRecord{{Name: nemKill, Start: 2, End: 4, Targets: []string{"n1"}}, {Name: nemPartitionHalf, Start: 6, End: 8},
		{Name: nemPause, Start: 9, End: 10}, {Name: nemClockForward, Start: 11, End: 12}, {Name: nemMembership, Start: 13, End: 14}}
	path := filepath.Join(t.TempDir(), "run.png")
	if err := writePicture(path, recs, faults, 15, 20, 1500*time.Millisecond, "test"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() < 1000 {
		t.Fatalf("picture: %v %v", fi, err)
	}
}
