//go:build !plots

package main

import (
	"errors"
	"time"
)

// writePicture without -tags plots: the run's history and summary are
// written as always; only the picture needs the plotting libraries
// (picture.go).
func writePicture(path string, recs []opRecord, faults []faultRecord, finalStart, finalEnd float64, timeout time.Duration, title string) error {
	return errors.New("run.png is drawn only by a jepsen-lite built with -tags plots (go run -tags plots ./jepsen-lite ...)")
}
