package storage

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/fsm"
)

// Options say which data dir to open and how.
type Options struct {
	// Dir is the data dir; Open creates it when missing.
	Dir string
	// ID is the node id the data dir must belong to (node.json); a new
	// data dir is pinned to it.
	ID string
	// Kind is the Raft log store: "" means what Dir holds, or Default for
	// a new dir; a kind that disagrees with Dir is a *MismatchError.
	Kind Kind
	// RejoinEmpty moves lost or damaged state aside and opens the dir
	// empty, so the node can rejoin as a new member.
	RejoinEmpty bool
	Logger      hclog.Logger
	// Reads is the newest log format this build applies (0:
	// fsm.CurrentFormat) and Version its release: a data dir that records
	// a newer format is refused (FormatTooNewError) rather than replayed
	// into a halt.
	Reads   fsm.Format
	Version string
}

func (o Options) reads() fsm.Format {
	if o.Reads == 0 {
		return fsm.CurrentFormat
	}
	return o.Reads
}

// DataDir is an opened, checked data dir: the Raft log and stable store and
// the snapshot store, ready to hand to raft.
type DataDir struct {
	Dir    string
	Kind   Kind
	Log    raft.LogStore
	Stable raft.StableStore
	Snaps  *raft.FileSnapshotStore
	// Rejoined says the old state was moved aside (RejoinEmpty): the node
	// starts empty and must rejoin as a new member.
	Rejoined bool

	stores *Stores
}

// Open checks and opens a data dir. Before anything is opened for writing
// it checks the identity and the Bolt files; then it opens the stores and
// reads every log entry and the newest snapshot once, so damage shows up
// now as a *CorruptError naming the file (or, with RejoinEmpty, moves the
// state aside and opens the dir empty). A new data dir is pinned to
// opts.ID.
func Open(opts Options) (*DataDir, error) {
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	rejoined, err := prepareDataDir(opts, log)
	if err != nil {
		return nil, err
	}
	d, err := openChecked(opts, log)
	var corrupt *CorruptError
	if errors.As(err, &corrupt) && opts.RejoinEmpty && !rejoined && !IsDiskFull(err) {
		aside, merr := moveAside(opts.Dir)
		if merr != nil {
			return nil, errors.Join(err, merr)
		}
		log.Warn("rejoining empty: old state moved aside; this node joins as a new member", "reason", err, "moved_to", aside)
		rejoined = true
		d, err = openChecked(opts, log)
	}
	if err != nil {
		return nil, err
	}
	d.Rejoined = rejoined
	if id, _ := ReadIdentity(opts.Dir); id == "" {
		if err := writeIdentity(opts.Dir, opts.ID); err != nil {
			d.Close()
			return nil, err
		}
	}
	return d, nil
}

// openChecked opens the Raft log and the snapshot store and reads both
// through once. On error nothing stays open.
func openChecked(opts Options, log hclog.Logger) (*DataDir, error) {
	stores, err := OpenStores(opts.Dir, opts.Kind, log)
	if err != nil {
		var mismatch *MismatchError
		if errors.As(err, &mismatch) || errors.Is(err, ErrLocked) {
			return nil, err
		}
		return nil, &CorruptError{File: LogPath(opts.Dir), Err: err}
	}
	d := &DataDir{Dir: opts.Dir, Kind: stores.Kind, Log: stores.Log, Stable: stores.Stable, stores: stores}
	log.Info("raft log", "kind", stores.Kind)
	if err := CheckLogStore(d.LogPath(), stores.Log, stores.Stable); err != nil {
		d.Close()
		return nil, err
	}
	base := snapshotBase(opts.Dir)
	removeFailedSnapshots(filepath.Join(base, SnapshotDir), log)
	snaps, err := raft.NewFileSnapshotStoreWithLogger(base, 2, log.Named("snapshots"))
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("open snapshot store: %w", err)
	}
	d.Snaps = snaps
	if err := CheckSnapshots(filepath.Join(base, SnapshotDir), snaps); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// LogPath names the data dir's Raft log for messages: wal/ or raft.db.
func (d *DataDir) LogPath() string { return LogPath(d.Dir) }

// LogPath names dir's Raft log for messages: wal/ or raft.db.
func LogPath(dir string) string {
	if kind, found, _ := Detect(dir); found && kind == WAL {
		return filepath.Join(dir, WALDir)
	}
	return filepath.Join(dir, BoltFile)
}

// Close closes the stores. It is safe to call more than once.
func (d *DataDir) Close() error {
	if d == nil || d.stores == nil {
		return nil
	}
	err := d.stores.Close()
	d.stores = nil
	return err
}
