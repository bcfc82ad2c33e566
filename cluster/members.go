package cluster

import (
	"context"
	"io/fs"
	"path/filepath"
	"sync"
	"time"

	"github.com/rlnode/rlnode/cluster/storage"
	"github.com/rlnode/rlnode/fsm"
)

// MemberStatusPath serves this node's status and disk use to the node a
// user asked for the whole cluster's.
const MemberStatusPath = "/internal/v1/status"

// Member is one server as the cluster overview shows it: its own status
// when it answered, else why not.
type Member struct {
	Peer
	Reachable bool   `json:"reachable"`
	Error     string `json:"error,omitempty"`
	// Status is the member's own answer (nil when unreachable).
	Status *MemberStatus `json:"status,omitempty"`
	// Lag is how many entries the member has yet to apply of the
	// highest commit index any member reported.
	Lag uint64 `json:"lag"`
	// Version and Format are the member's release and the newest log
	// format it applies, from its status ("" and 0 when unreachable or
	// of a release before formats were reported, which counts as 3).
	Version string     `json:"version"`
	Format  fsm.Format `json:"format"`
}

// MemberStatus is Status plus what the node's disk holds and the leases
// it holds.
type MemberStatus struct {
	Status
	LogBytes      int64      `json:"logBytes"`
	SnapshotBytes int64      `json:"snapshotBytes"`
	Leases        LeaseStats `json:"leases"`
}

// LocalMemberStatus is this node's status, the sizes of its Raft log
// store and snapshots, and its lease totals.
func (v *Views) LocalMemberStatus() MemberStatus {
	return MemberStatus{Status: v.local.Status(), LogBytes: dirBytes(storage.LogPath(v.dataDir)),
		SnapshotBytes: dirBytes(filepath.Join(v.dataDir, storage.SnapshotDir)), Leases: v.local.leaseStats()}
}

// dirBytes sums the sizes of the files under path (a file or a
// directory); what cannot be read counts as nothing.
func dirBytes(path string) int64 {
	var total int64
	filepath.WalkDir(path, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				total += info.Size()
			}
		}
		return nil
	})
	return total
}

// Members asks every server of the configuration for its status over the
// internal path (a second each at most) and reports who answered.
func (v *Views) Members(ctx context.Context) ([]Member, error) {
	peers, err := v.members.Peers()
	if err != nil {
		return nil, err
	}
	out := make([]Member, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		out[i].Peer = p
		if p.ID == v.id {
			st := v.LocalMemberStatus()
			out[i].Status, out[i].Reachable = &st, true
			continue
		}
		if p.HTTPAddr == "" {
			out[i].Error = "address unknown"
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			var st MemberStatus
			if err := v.peers.getJSON(ctx, BaseURL(p.HTTPAddr)+MemberStatusPath, &st); err != nil {
				out[i].Error = err.Error()
				return
			}
			out[i].Status, out[i].Reachable = &st, true
		}()
	}
	wg.Wait()
	var commit uint64
	for _, m := range out {
		if m.Status != nil {
			commit = max(commit, m.Status.CommitIndex)
		}
	}
	for i, m := range out {
		if m.Status != nil && commit > m.Status.AppliedIndex {
			out[i].Lag = commit - m.Status.AppliedIndex
		}
		if m.Status != nil {
			out[i].Version, out[i].Format = m.Status.Version, m.Status.Format
		}
	}
	return out, nil
}
