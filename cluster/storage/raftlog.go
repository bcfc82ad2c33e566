package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	"go.etcd.io/bbolt"
)

// Kind is a Raft log store.
type Kind string

const (
	// Bolt keeps the log in raft.db (raft-boltdb/v2): two fdatasyncs per
	// append (data pages, then meta page).
	Bolt Kind = "bolt"
	// WAL keeps the log in segment files (hashicorp/raft-wal): one fsync per
	// append.
	WAL Kind = "wal"
)

// Default is the kind a new data dir gets when none is asked for. Measured
// with scripts/bench.sh (3-node clusters of both kinds and the Redis
// baseline in one run, 3 interleaved repetitions, medians, 2-core VM shared
// with other work): /check on the leader, wal/bolt at 64 and 256 workers:
// 1.59x and 1.85x (loadavg 11-28), 1.68x and 1.10x (loadavg 3-15), 1.08x
// and 1.02x (loadavg 2-6); wal faster in 13 of the 18 pairs. One fsync per
// append instead of Bolt's two; the second one costs most on a busy disk.
const Default = WAL

// File names inside a data dir.
const (
	BoltFile = "raft.db"
	WALDir   = "wal"
)

// kindKey is the stable-store key in raft.db that marks a wal data dir.
var kindKey = []byte("rlnode.raftLog")

// ErrWALMissing means raft.db belongs to a wal data dir whose wal/ is gone.
var ErrWALMissing = errors.New("raft.db belongs to a wal data dir, but wal/ is missing: the raft log is lost")

// WALMissing reports whether dir's raft.db is marked as a wal data dir's
// while dir has no wal/. It reads raft.db through a read-only handle and
// reports false when there is no raft.db.
func WALMissing(dir string) (bool, error) {
	if _, err := os.Stat(filepath.Join(dir, WALDir)); !errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	path := filepath.Join(dir, BoltFile)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	defer db.Close()
	var marked bool
	err = db.View(func(tx *bbolt.Tx) error {
		if b := tx.Bucket([]byte("conf")); b != nil { // raft-boltdb's stable store bucket
			marked = string(b.Get(kindKey)) == string(WAL)
		}
		return nil
	})
	return marked, err
}

// ParseKind reads "wal" or "bolt"; "" stays "" (no preference).
func ParseKind(s string) (Kind, error) {
	switch k := Kind(s); k {
	case "", Bolt, WAL:
		return k, nil
	}
	return "", fmt.Errorf("raft log kind %q: want wal or bolt", s)
}

// Detect reports the kind of log dir holds; found is false for a dir with
// neither (a new node).
func Detect(dir string) (kind Kind, found bool, err error) {
	st, err := os.Stat(filepath.Join(dir, WALDir))
	switch {
	case err == nil && st.IsDir():
		return WAL, true, nil
	case err == nil:
		return "", false, fmt.Errorf("%s is not a directory; a wal data dir keeps its log there", filepath.Join(dir, WALDir))
	case !errors.Is(err, os.ErrNotExist):
		return "", false, fmt.Errorf("look for a raft log in %s: %w", dir, err)
	}
	if _, err := os.Stat(filepath.Join(dir, BoltFile)); err == nil {
		return Bolt, true, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", false, fmt.Errorf("look for a raft log in %s: %w", dir, err)
	}
	return "", false, nil
}

// MismatchError is returned when the kind asked for is not the kind the
// data dir holds.
type MismatchError struct {
	Dir          string
	OnDisk, Want Kind
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("data dir %s holds a %s raft log, not %s: run with the %s log (drop --raft-log or set it to %s), or stop the node and convert it with `rlnode migrate-log --data-dir %s --to %s`",
		e.Dir, e.OnDisk, e.Want, e.OnDisk, e.OnDisk, e.Dir, e.Want)
}

// Stores is an open log and stable store.
type Stores struct {
	Kind   Kind
	Log    raft.LogStore
	Stable raft.StableStore
	bolt   *raftboltdb.BoltStore
	wal    *wal.WAL
}

// OpenStores opens the log and stable stores in dir (which must exist),
// without the checks Open runs. want "" means the kind
// on disk, or Default for a new dir; a want that disagrees with the disk is
// a *MismatchError.
func OpenStores(dir string, want Kind, logger hclog.Logger) (*Stores, error) {
	onDisk, found, err := Detect(dir)
	if err != nil {
		return nil, err
	}
	kind := want
	switch {
	case found && want != "" && want != onDisk:
		return nil, &MismatchError{Dir: dir, OnDisk: onDisk, Want: want}
	case found:
		kind = onDisk
	case want == "":
		kind = Default
	}
	return open(dir, kind, logger)
}

func open(dir string, kind Kind, logger hclog.Logger) (*Stores, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	if kind == WAL {
		// A wal log without its raft.db has lost the term and vote: starting
		// would let this node vote twice in a term. Refuse.
		_, metaErr := os.Stat(filepath.Join(dir, WALDir, "wal-meta.db"))
		if _, err := os.Stat(filepath.Join(dir, BoltFile)); errors.Is(err, os.ErrNotExist) && metaErr == nil {
			return nil, fmt.Errorf("%s has a raft log in %s/ but no %s (its term and vote): restore %s from a backup, or remove the data dir and let the node rejoin", dir, WALDir, BoltFile, BoltFile)
		}
	}
	b, err := openBolt(filepath.Join(dir, BoltFile))
	if err != nil {
		return nil, err
	}
	s := &Stores{Kind: kind, Log: b, Stable: b, bolt: b}
	if kind == Bolt {
		if v, err := b.Get(kindKey); err == nil && string(v) == string(WAL) {
			b.Close()
			return nil, fmt.Errorf("%s: %w", dir, ErrWALMissing)
		}
		return s, nil
	}
	w, err := openWAL(filepath.Join(dir, WALDir), logger)
	if err != nil {
		b.Close()
		return nil, err
	}
	s.wal, s.Log = w, w
	if v, err := b.Get(kindKey); err != nil || string(v) != string(WAL) {
		if err := b.Set(kindKey, []byte(WAL)); err != nil {
			s.Close()
			return nil, fmt.Errorf("mark %s as a wal data dir's: %w", BoltFile, err)
		}
	}
	return s, nil
}

// openBolt opens a raft-boltdb file. A second process on the same file gets
// a clear error instead of blocking forever on Bolt's lock. (NoFreelistSync
// was tried to save a page write per commit: no faster here, so Bolt keeps
// its defaults.)
func openBolt(path string) (*raftboltdb.BoltStore, error) {
	b, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bbolt.Options{Timeout: time.Second}})
	if err != nil {
		if errors.Is(err, bbolt.ErrTimeout) {
			return nil, fmt.Errorf("open raft log in %s: it is %w", filepath.Dir(path), ErrLocked)
		}
		return nil, fmt.Errorf("open raft log %s (corrupt or not a Bolt file?): %w", path, err)
	}
	return b, nil
}

// openWAL opens (creating) a raft-wal directory. raft-wal reports most
// damage as errors; a panic on a damaged file is turned into one too, so a
// corrupt log never crashes the process with a stack trace.
func openWAL(dir string, logger hclog.Logger) (w *wal.WAL, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create raft log dir: %w", err)
	}
	defer func() {
		if r := recover(); r != nil {
			w, err = nil, fmt.Errorf("open raft log %s: it is corrupt (reading it failed: %v); restore the data dir from a backup or remove it and let the node rejoin", dir, r)
		}
	}()
	w, err = wal.Open(dir, wal.WithLogger(logger.Named("wal")))
	if err != nil {
		return nil, fmt.Errorf("open raft log %s (corrupt WAL? restore the data dir from a backup or remove it and let the node rejoin): %w", dir, err)
	}
	return w, nil
}

// Close closes both stores.
func (s *Stores) Close() error {
	var errs []error
	if s.wal != nil {
		if err := s.wal.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close raft log: %w", err))
		}
	}
	if err := s.bolt.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close %s: %w", BoltFile, err))
	}
	return errors.Join(errs...)
}
