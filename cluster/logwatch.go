package cluster

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/cluster/storage"
)

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
	if storage.IsDiskFull(w.failErr) {
		what = "cannot write its Raft log: the disk is full"
	}
	last, _ := w.LogStore.LastIndex()
	behind := uint64(0)
	if w.lastLost > last {
		behind = w.lastLost - last
	}
	cause, _, _ := strings.Cut(w.failErr.Error(), "\n")
	return fmt.Errorf("%s (failing for %s, at least %d entries behind): %s",
		what, time.Since(w.since).Round(time.Second), behind, cause)
}
