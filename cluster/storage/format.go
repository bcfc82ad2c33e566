package storage

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/internal/boundedfile"
)

// FormatFile records the newest log and snapshot format this data dir may
// hold. A node raises it once it sees every voter at a format (the cluster
// version gate has opened, so entries of that format may follow); a data
// dir without it was last written by a release before formats were
// recorded and reads as fsm.FormatR3.
const FormatFile = "format.json"

// formatRecord is FormatFile's content: the format and the release that
// raised it, for the message an older release gives.
type formatRecord struct {
	Format  fsm.Format `json:"format"`
	Version string     `json:"version,omitempty"`
}

// ErrFormatTooNew means a data dir may hold entries this build cannot
// apply: replaying them would halt the node at the first one.
var ErrFormatTooNew = errors.New("data dir written by a newer release")

// FormatTooNewError names both sides of ErrFormatTooNew.
type FormatTooNewError struct {
	Dir         string
	Have        fsm.Format // what the data dir records
	HaveVersion string     // the release that recorded it
	Reads       fsm.Format // the newest format this build reads
	Version     string     // this build's release
}

func (e *FormatTooNewError) Error() string {
	by := ""
	if e.HaveVersion != "" {
		by = " by rlnode " + e.HaveVersion
	}
	return fmt.Sprintf("%v: data dir %s may hold log format %d (raised%s), but this rlnode%s reads formats %d to %d; "+
		"it refuses to start rather than replay entries it cannot apply. Run rlnode %s or newer on this data dir "+
		"(rolling back after the cluster's format was raised: docs/upgrading.md)",
		ErrFormatTooNew, e.Dir, e.Have, by, prefixed(" ", e.Version), fsm.OldestFormat, e.Reads, orUnknown(e.HaveVersion))
}

func (e *FormatTooNewError) Unwrap() error { return ErrFormatTooNew }

func prefixed(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}

func orUnknown(v string) string {
	if v == "" {
		return "(the release that wrote it)"
	}
	return v
}

// ReadFormat returns the format dir records (fsm.FormatR3 when it records
// none) and the release that recorded it.
func ReadFormat(dir string) (fsm.Format, string, error) {
	path := filepath.Join(dir, FormatFile)
	// Bounded: a FIFO in its place hung the node's start (and SIGTERM with
	// it), a link to /dev/zero ran it out of memory.
	b, err := boundedfile.Read(path, MaxMetaFileBytes)
	if errors.Is(err, os.ErrNotExist) {
		return fsm.FormatR3, "", nil
	}
	if err != nil {
		return 0, "", &CorruptError{File: path, Err: err}
	}
	var rec formatRecord
	if err := json.Unmarshal(b, &rec); err != nil || rec.Format == 0 {
		return 0, "", &CorruptError{File: path, Err: errors.New(`want {"format":<n>,"version":"<release>"}`)}
	}
	return rec.Format, rec.Version, nil
}

// checkFormat refuses a data dir that records a newer format than reads.
func checkFormat(dir string, reads fsm.Format, version string) error {
	have, by, err := ReadFormat(dir)
	if err != nil {
		return err
	}
	if have > reads {
		return &FormatTooNewError{Dir: dir, Have: have, HaveVersion: by, Reads: reads, Version: version}
	}
	return nil
}

// RaiseFormat records that dir may hold entries of format f from now on,
// written by release version; it never lowers what dir records. The file
// is written before the entries can be (write, then rename).
func RaiseFormat(dir string, f fsm.Format, version string) error {
	have, _, err := ReadFormat(dir)
	if err != nil {
		return err
	}
	if f <= have {
		return nil
	}
	path := filepath.Join(dir, FormatFile)
	b, _ := json.Marshal(formatRecord{Format: f, Version: version})
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return syncDir(dir)
}
