package cluster

import (
	"path/filepath"
	"sync/atomic"
	"syscall"

	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/cluster/storage"
)

// DiskUse is what the node's data dir holds and what its file system has
// left, for metrics and alerts (read at scrape time).
type DiskUse struct {
	LogBytes, SnapshotBytes int64
	// FSFree and FSSize are the data dir's file system's bytes available
	// to this process and its size (0 when statfs fails).
	FSFree, FSSize uint64
}

// Disk measures the data dir now.
func (v *Views) Disk() DiskUse {
	d := DiskUse{LogBytes: dirBytes(storage.LogPath(v.dataDir)), SnapshotBytes: dirBytes(filepath.Join(v.dataDir, storage.SnapshotDir))}
	var st syscall.Statfs_t
	if syscall.Statfs(v.dataDir, &st) == nil {
		d.FSFree, d.FSSize = st.Bavail*uint64(st.Bsize), st.Blocks*uint64(st.Bsize)
	}
	return d
}

// SnapshotFailures counts snapshots this node failed to write (Raft's own
// and those asked for), since start.
func (v *Views) SnapshotFailures() uint64 { return v.snapFailures.Load() }

// countingSnapshot counts a failed Persist: raft only logs it.
type countingSnapshot struct {
	raft.FSMSnapshot
	failures *atomic.Uint64
}

func (s countingSnapshot) Persist(sink raft.SnapshotSink) error {
	err := s.FSMSnapshot.Persist(sink)
	if err != nil {
		s.failures.Add(1)
	}
	return err
}
