package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"
)

// DiskFullError reports that the data dir's disk had no room: the files
// may be fine, so the advice for a corrupt data dir (rejoin empty, which
// discards them) would be wrong.
type DiskFullError struct {
	Dir string
	Err error
}

func (e *DiskFullError) Error() string {
	return fmt.Sprintf("the disk holding %s is full (no space left on device)%s\n"+
		"  The node's state is not known to be damaged: free space on that disk (or grow the volume)\n"+
		"  and start the node again. Do not use --rejoin-empty for this: it would discard the state.",
		e.Dir, e.where())
}

// where names the file that could not be written, without the wrapped
// messages' advice for damaged files.
func (e *DiskFullError) where() string {
	var pe *fs.PathError
	var ce *CorruptError
	switch {
	case errors.As(e.Err, &pe):
		return fmt.Sprintf(": %s %s", pe.Op, pe.Path)
	case errors.As(e.Err, &ce):
		return ": writing " + ce.File
	}
	return ""
}

func (e *DiskFullError) Unwrap() error { return e.Err }

// IsDiskFull reports whether err comes from a full disk (or an exhausted
// quota). The standard library keeps the errno in the chain; libraries
// that format their cause with %v (raft-wal, Bolt) keep only its text,
// the C library's fixed strerror wording, which is matched here and only
// here.
func IsDiskFull(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	s := err.Error()
	return strings.Contains(s, "no space left on device") || strings.Contains(s, "disk quota exceeded")
}

// removeFailedSnapshots deletes the "*.tmp" directories a snapshot that
// failed part-way (a full disk, a crash) leaves in the snapshot store:
// raft never reads or reaps them, so each would hold its space for good.
func removeFailedSnapshots(dir string, logger hclog.Logger) {
	tmps, _ := filepath.Glob(filepath.Join(dir, "*.tmp"))
	for _, t := range tmps {
		if err := os.RemoveAll(t); err != nil {
			logger.Warn("cannot remove a failed snapshot", "dir", t, "error", err)
			continue
		}
		logger.Info("removed a failed snapshot's temporary directory", "dir", t)
	}
}
