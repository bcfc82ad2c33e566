package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
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

// isDiskFull reports whether err comes from a full disk. The standard
// library keeps syscall.ENOSPC in the chain; libraries that format the
// cause with %v (raft-wal, Bolt) keep only its text, which is the C
// library's fixed strerror wording.
func isDiskFull(err error) bool {
	if err == nil {
		return false
	}
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) ||
		strings.Contains(err.Error(), "no space left on device") || strings.Contains(err.Error(), "disk quota exceeded")
}

func firstLineOf(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// writeWatch is the Raft log store as Raft sees it, remembering whether
// the last append failed, so readiness can say the node cannot persist
// (a follower whose appends fail keeps hearing heartbeats and would
// otherwise look healthy while it falls behind).
type writeWatch struct {
	raft.LogStore

	mu       sync.Mutex
	failErr  error
	since    time.Time
	lastLost uint64 // highest index offered to a failed append
}

// IsMonotonic passes the store's own answer through: raft asks the store
// it is given, and raft-wal's log must be told apart from Bolt's.
func (w *writeWatch) IsMonotonic() bool {
	m, ok := w.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

func (w *writeWatch) StoreLog(l *raft.Log) error {
	return w.note(w.LogStore.StoreLog(l), l.Index)
}

func (w *writeWatch) StoreLogs(ls []*raft.Log) error {
	var last uint64
	if len(ls) > 0 {
		last = ls[len(ls)-1].Index
	}
	return w.note(w.LogStore.StoreLogs(ls), last)
}

func (w *writeWatch) note(err error, last uint64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		w.failErr = nil
		return nil
	}
	if w.failErr == nil {
		w.since = time.Now()
	}
	w.failErr, w.lastLost = err, max(w.lastLost, last)
	return err
}

// failing says why the node cannot persist its log, or nil when the last
// append succeeded.
func (w *writeWatch) failing() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failErr == nil {
		return nil
	}
	what := "cannot write its Raft log"
	if isDiskFull(w.failErr) {
		what = "cannot write its Raft log: the disk is full"
	}
	last, _ := w.LogStore.LastIndex()
	behind := uint64(0)
	if w.lastLost > last {
		behind = w.lastLost - last
	}
	return fmt.Errorf("%s (failing for %s, at least %d entries behind): %s",
		what, time.Since(w.since).Round(time.Second), behind, firstLineOf(w.failErr))
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
