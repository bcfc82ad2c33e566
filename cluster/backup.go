package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/internal/boundedfile"
	"github.com/rlnode/rlnode/policy"
)

// Backup and restore. A backup is the state machine's own snapshot format
// (every live window, the replicated clock and the node metadata, ending
// in a CRC), taken on the leader after a read barrier, so it holds every
// hit committed before the request. Restore hands such a file to raft's
// user restore on the leader of a new, empty cluster, which installs it
// as a snapshot on every member. Followers forward both (leaderops.go).

// ErrNotEmpty is returned when a restore would overwrite live windows.
var ErrNotEmpty = errors.New("the cluster is not empty")

// ErrInvalidBackup is returned for bytes that are not a whole rlnode
// backup (format or CRC): the sender's fault, not the node's.
var ErrInvalidBackup = errors.New("not a valid rlnode backup")

// writerSink lets the state machine persist a snapshot into any writer.
type writerSink struct{ io.Writer }

func (writerSink) ID() string    { return "backup" }
func (writerSink) Cancel() error { return nil }
func (writerSink) Close() error  { return nil }

// backup writes a consistent snapshot of the state to w, on the leader.
func (n *Node) backup(ctx context.Context, w io.Writer) error {
	if err := n.readBarrier(ctx); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	snap, err := n.fsm.Snapshot()
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	defer snap.Release()
	if err := snap.Persist(writerSink{w}); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	return nil
}

// MaxBackupBytes is the largest backup a node restores or a command reads:
// far above any real state (about 200 bytes per live key), it is there so
// that a size is checked before anything is read.
const MaxBackupBytes = 64 << 30

// OpenBackup opens a backup file: a regular file (or a link to one) of at
// most MaxBackupBytes, with its size; a device, FIFO or directory is
// refused with its name (internal/boundedfile).
func OpenBackup(path string) (*os.File, int64, error) {
	return boundedfile.Open(path, MaxBackupBytes)
}

// VerifyBackup checks a backup file end to end (format and CRC) by loading
// it into a scratch state machine.
func VerifyBackup(path string) (windows int, err error) {
	f, _, err := OpenBackup(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if windows, err = checkBackup(f); err != nil {
		return 0, fmt.Errorf("%s is %w", path, err)
	}
	return windows, nil
}

// checkBackup loads a backup into a scratch state machine and counts its
// windows. It leaves r open.
func checkBackup(r io.Reader) (windows int, err error) {
	scratch := fsm.New(fsm.Config{})
	if err := scratch.Restore(io.NopCloser(r)); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalidBackup, err)
	}
	return scratch.Stats().StoredWindows, nil
}

// Restored says what a restore installed, as the leader saw it.
type Restored struct {
	LiveWindows int    `json:"liveWindows"`
	Digest      string `json:"digest"`
	ServedBy    string `json:"servedBy"`
}

// restore is RestoreBackup on the leader.
func (n *Node) restore(ctx context.Context, r io.Reader, size int64, force bool) (Restored, error) {
	if err := n.restoreOnLeader(ctx, r, size, force); err != nil {
		return Restored{}, err
	}
	digest, _ := n.fsm.Digest()
	return Restored{LiveWindows: n.fsm.Stats().StoredWindows, Digest: fmt.Sprintf("%016x", digest), ServedBy: n.cfg.ID}, nil
}

func (n *Node) restoreOnLeader(ctx context.Context, r io.Reader, size int64, force bool) error {
	if size > MaxBackupBytes {
		return fmt.Errorf("restore: %w: %d bytes, more than the %d a backup may be", ErrInvalidBackup, size, int64(MaxBackupBytes))
	}
	if err := n.readBarrier(ctx); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if !force {
		if err := n.notNew(); err != nil {
			return fmt.Errorf("restore: %w; restore into a new, empty cluster, or overwrite it with rlnode restore --force (?force=true)", err)
		}
	}
	// Check the whole file before raft sees it: a damaged backup must not
	// become the cluster's state.
	tmp, err := os.CreateTemp(n.cfg.DataDir, "restore-*.tmp")
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if m, err := io.Copy(tmp, r); err != nil || m != size {
		return fmt.Errorf("restore: received %d of %d bytes: %v", m, size, err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	// The temp file's path is this node's business: the error names the
	// body, which is what the caller sent.
	if _, err := checkBackup(tmp); err != nil {
		return fmt.Errorf("restore: the body is %w", err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	before := n.fsm.Nodes()
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Size: size}
	// A restore replaces the policy table: a policy write like any other
	// (checkTableVersion).
	n.policyMu.Lock()
	defer n.policyMu.Unlock()
	if err := n.raft.Restore(meta, tmp, n.cfg.ApplyTimeout*10); err != nil {
		return fmt.Errorf("restore: %w", translate(err))
	}
	n.log.Warn("restored the cluster's state from a backup", "bytes", size)
	return n.keepNodeMetadata(before)
}

// notNew says what a restore would replace that a new cluster does not
// hold: windows, or policies other than the seed this node writes into a
// new cluster (a table changed by hand is as much the cluster's state as
// its windows).
func (n *Node) notNew() error {
	if w := n.fsm.Stats().StoredWindows; w > 0 {
		return fmt.Errorf("%w: it holds %d windows", ErrNotEmpty, w)
	}
	seed := make(map[string]policy.Policy, len(n.cfg.Seed))
	for _, p := range n.cfg.Seed {
		seed[p.Name] = p
	}
	var custom []string
	for _, p := range n.fsm.Policies() {
		if s, ok := seed[p.Name]; !ok || !s.Equal(p) {
			custom = append(custom, p.Name)
		}
	}
	if len(custom) == 0 {
		return nil
	}
	named := strings.Join(custom[:min(3, len(custom))], ", ")
	if len(custom) > 3 {
		named += ", ..."
	}
	return fmt.Errorf("%w: it holds %d policies a new cluster would not (%s)", ErrNotEmpty, len(custom), named)
}

// keepNodeMetadata puts back the metadata the cluster had before a
// restore (the backup carries the old cluster's addresses).
func (n *Node) keepNodeMetadata(before map[string]fsm.Node) error {
	after := n.fsm.Nodes()
	var errs []error
	for id, m := range before {
		if after[id] != m {
			errs = append(errs, n.apply(fsm.EncodeSetNode(m), n.cfg.ApplyTimeout).Error())
		}
	}
	for id := range after {
		if _, ok := before[id]; !ok {
			errs = append(errs, n.apply(fsm.EncodeRemoveNode(id), n.cfg.ApplyTimeout).Error())
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("restore: put back node metadata: %w", err)
	}
	return nil
}
