package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
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

// Backups take and install backups: on the leader, or streamed to and
// from it (the front ends take the value, Node.Backups). They reach the
// node through backupNode and read the state machine through
// backupState, so the checks before a restore are tested without a
// cluster (backup_internal_test.go).
type Backups struct {
	id           string
	dataDir      string // the restore's temporary copy goes here
	seed         []policy.Policy
	applyTimeout time.Duration
	state        backupState
	node         backupNode
	// policyMu is the node's lock of policy writes: a restore replaces
	// the table, a policy write like any other (checkTableVersion).
	policyMu *sync.Mutex
	log      hclog.Logger
}

// backupState is the state machine as backups read it.
type backupState interface {
	Snapshot() (raft.FSMSnapshot, error)
	Digest() (digest uint64, appliedIndex uint64)
	Stats() fsm.Stats
	Policies() []policy.Policy
	Nodes() map[string]fsm.Node
}

// backupNode is the node as backups use it: the leader's log, or the
// way to it.
type backupNode interface {
	IsLeader() bool
	// forwardBackup and forwardRestore stream to and from the leader.
	forwardBackup(ctx context.Context, w io.Writer) error
	forwardRestore(ctx context.Context, r io.Reader, size int64, force bool) (Restored, error)
	// readBarrier returns once this leader applied everything committed
	// before the call.
	readBarrier(ctx context.Context) error
	// restoreSnapshot hands a checked backup to raft's user restore.
	restoreSnapshot(meta *raft.SnapshotMeta, r io.Reader, timeout time.Duration) error
	// apply writes one entry.
	apply(data []byte, timeout time.Duration) raft.ApplyFuture
}

// nodeBackups is the node as its backups use it.
type nodeBackups struct{ n *Node }

func (a nodeBackups) IsLeader() bool                        { return a.n.IsLeader() }
func (a nodeBackups) readBarrier(ctx context.Context) error { return a.n.readBarrier(ctx) }
func (a nodeBackups) forwardBackup(ctx context.Context, w io.Writer) error {
	return a.n.fwd.backup(ctx, w)
}
func (a nodeBackups) forwardRestore(ctx context.Context, r io.Reader, size int64, force bool) (Restored, error) {
	return a.n.fwd.restore(ctx, r, size, force)
}

func (a nodeBackups) apply(data []byte, timeout time.Duration) raft.ApplyFuture {
	return a.n.apply(data, timeout)
}
func (a nodeBackups) restoreSnapshot(meta *raft.SnapshotMeta, r io.Reader, timeout time.Duration) error {
	return a.n.raft.Restore(meta, r, timeout)
}

// backup writes a consistent snapshot of the state to w, on the leader.
func (b *Backups) backup(ctx context.Context, w io.Writer) error {
	if err := b.node.readBarrier(ctx); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	snap, err := b.state.Snapshot()
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
func (b *Backups) restore(ctx context.Context, r io.Reader, size int64, force bool) (Restored, error) {
	if err := b.restoreOnLeader(ctx, r, size, force); err != nil {
		return Restored{}, err
	}
	digest, _ := b.state.Digest()
	return Restored{LiveWindows: b.state.Stats().StoredWindows, Digest: fmt.Sprintf("%016x", digest), ServedBy: b.id}, nil
}

func (b *Backups) restoreOnLeader(ctx context.Context, r io.Reader, size int64, force bool) error {
	if size > MaxBackupBytes {
		return fmt.Errorf("restore: %w: %d bytes, more than the %d a backup may be", ErrInvalidBackup, size, int64(MaxBackupBytes))
	}
	if err := b.node.readBarrier(ctx); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if !force {
		if err := b.notNew(); err != nil {
			return fmt.Errorf("restore: %w; restore into a new, empty cluster, or overwrite it with rlnode restore --force (?force=true)", err)
		}
	}
	// Check the whole file before raft sees it: a damaged backup must not
	// become the cluster's state.
	tmp, err := os.CreateTemp(b.dataDir, "restore-*.tmp")
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
	before := b.state.Nodes()
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Size: size}
	// A restore replaces the policy table: a policy write like any other
	// (checkTableVersion).
	b.policyMu.Lock()
	defer b.policyMu.Unlock()
	if err := b.node.restoreSnapshot(meta, tmp, b.applyTimeout*10); err != nil {
		return fmt.Errorf("restore: %w", translate(err))
	}
	b.log.Warn("restored the cluster's state from a backup", "bytes", size)
	return b.keepNodeMetadata(before)
}

// notNew says what a restore would replace that a new cluster does not
// hold: windows, or policies other than the seed this node writes into a
// new cluster (a table changed by hand is as much the cluster's state as
// its windows).
func (b *Backups) notNew() error {
	if w := b.state.Stats().StoredWindows; w > 0 {
		return fmt.Errorf("%w: it holds %d windows", ErrNotEmpty, w)
	}
	seed := make(map[string]policy.Policy, len(b.seed))
	for _, p := range b.seed {
		seed[p.Name] = p
	}
	var custom []string
	for _, p := range b.state.Policies() {
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
func (b *Backups) keepNodeMetadata(before map[string]fsm.Node) error {
	after := b.state.Nodes()
	var errs []error
	for id, m := range before {
		if after[id] != m {
			errs = append(errs, b.node.apply(fsm.EncodeSetNode(m), b.applyTimeout).Error())
		}
	}
	for id := range after {
		if _, ok := before[id]; !ok {
			errs = append(errs, b.node.apply(fsm.EncodeRemoveNode(id), b.applyTimeout).Error())
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("restore: put back node metadata: %w", err)
	}
	return nil
}

// Backup writes a consistent snapshot of the state to w: on the leader, or
// streamed from it.
func (b *Backups) Backup(ctx context.Context, w io.Writer) error {
	if b.node.IsLeader() {
		return b.backup(ctx, w)
	}
	return b.node.forwardBackup(ctx, w)
}

// RestoreBackup replaces the cluster's state with a backup of size bytes
// read from r: on the leader, or streamed to it. Unless force is set the
// cluster must hold no windows: restore is for a new cluster, not for
// rolling one back. The cluster's own node metadata (HTTP addresses) is
// kept, not the backup's.
func (b *Backups) RestoreBackup(ctx context.Context, r io.Reader, size int64, force bool) (Restored, error) {
	if b.node.IsLeader() {
		return b.restore(ctx, r, size, force)
	}
	return b.node.forwardRestore(ctx, r, size, force)
}

// serveBackup is backupPath on the leader. An error after the first byte
// aborts the connection, so the sender never takes a cut stream for a
// whole backup (the format ends in a CRC too).
func (b *Backups) serveBackup(w http.ResponseWriter, r *http.Request) {
	if !b.node.IsLeader() {
		writeError(w, b.id, ErrNotLeader)
		return
	}
	lw := &lazyStream{w: w, servedBy: b.id}
	if err := b.backup(r.Context(), lw); err != nil {
		if lw.started {
			b.log.Error("forwarded backup stream failed", "error", err)
			panic(http.ErrAbortHandler)
		}
		writeError(w, b.id, err)
	}
}

// serveRestore is restorePath on the leader.
func (b *Backups) serveRestore(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength <= 0 {
		writeError(w, b.id, fmt.Errorf("%w: restore: the backup must come with its Content-Length", errMalformed))
		return
	}
	if !b.node.IsLeader() {
		writeError(w, b.id, ErrNotLeader)
		return
	}
	res, err := b.restore(r.Context(), r.Body, r.ContentLength, r.URL.Query().Get("force") == "true")
	if err != nil {
		writeError(w, b.id, err)
		return
	}
	w.Header().Set(HeaderServedBy, b.id)
	writeJSON(w, res)
}

// lazyStream sets a stream's success headers on its first write only.
type lazyStream struct {
	w        http.ResponseWriter
	servedBy string
	started  bool
}

func (l *lazyStream) Write(p []byte) (int, error) {
	if !l.started {
		l.started = true
		l.w.Header().Set("Content-Type", "application/octet-stream")
		l.w.Header().Set(HeaderServedBy, l.servedBy)
		l.w.WriteHeader(http.StatusOK)
	}
	return l.w.Write(p)
}
