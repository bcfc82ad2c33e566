package storage

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/internal/boundedfile"
)

// CorruptError reports a data-dir file that cannot be read safely. Its
// message names the file and the ways back: rejoin empty or restore.
type CorruptError struct {
	File string
	Err  error
}

func (e *CorruptError) Error() string {
	what := ""
	if filepath.Base(e.File) == "wal" || filepath.Base(filepath.Dir(e.File)) == "wal" {
		what = "corrupt WAL: "
	}
	return fmt.Sprintf("%s%s is corrupt or unreadable: %v\n"+
		"  This node must not start on it (it could serve or vote with lost or garbled history).\n"+
		"  Recovery: if the other members are healthy, start this node again with --rejoin-empty\n"+
		"  --join <members>: it moves its files aside and joins as a new member, copying the cluster's\n"+
		"  state. If this was the last copy, restore the newest backup into a new cluster\n"+
		"  (`rlnode restore`). See docs/recovery.md.",
		what, e.File, e.Err)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// Guard runs f and turns a panic or a memory fault inside it (Bolt reads a
// corrupt page through its mmap) into a CorruptError for file.
func Guard(file string, f func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	defer func() {
		if r := recover(); r != nil {
			err = &CorruptError{File: file, Err: fmt.Errorf("reading it failed: %v", r)}
		}
	}()
	return f()
}

// Bolt's meta page layout (go.etcd.io/bbolt, file format version 2): a
// 16-byte page header, then magic, version, page size, flags, root bucket
// (root page, sequence), freelist page, high-water page, txid and an
// FNV-64a checksum of the 56 bytes before it.
const (
	boltMagic        = 0xED0CDAED
	boltVersion      = 2
	boltPageHeader   = 16
	boltMetaChecksum = 56
)

type boltMeta struct {
	pageSize uint32
	hwm      uint64 // high-water mark: pages in use
	txid     uint64
}

func readBoltMeta(b []byte) (boltMeta, error) {
	if len(b) < boltPageHeader+boltMetaChecksum+8 {
		return boltMeta{}, errors.New("meta page is truncated")
	}
	m := b[boltPageHeader:]
	le := binary.LittleEndian
	if le.Uint32(m[0:]) != boltMagic {
		return boltMeta{}, errors.New("meta page has no Bolt magic number (overwritten or zeroed?)")
	}
	if v := le.Uint32(m[4:]); v != boltVersion {
		return boltMeta{}, fmt.Errorf("meta page has version %d, want %d", v, boltVersion)
	}
	h := fnv.New64a()
	h.Write(m[:boltMetaChecksum])
	if h.Sum64() != le.Uint64(m[boltMetaChecksum:]) {
		return boltMeta{}, errors.New("meta page checksum mismatch")
	}
	return boltMeta{pageSize: le.Uint32(m[8:]), hwm: le.Uint64(m[40:]), txid: le.Uint64(m[48:])}, nil
}

// CheckBoltFile checks a Bolt file before it is opened for writing: both
// meta pages must be valid (Bolt silently falls back to the older one,
// dropping the last commit, when the newer one is damaged), every page
// reachable from the root must read without a fault, and Bolt's own
// consistency check must pass. It reads the file through a read-only
// handle; a file locked by another process gives ErrLocked.
func CheckBoltFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return &CorruptError{File: path, Err: err}
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return &CorruptError{File: path, Err: err}
	}
	head := make([]byte, 4096)
	n, _ := io.ReadFull(f, head)
	m0, err := readBoltMeta(head[:n])
	if err != nil {
		f.Close()
		return &CorruptError{File: path, Err: fmt.Errorf("first meta page: %w", err)}
	}
	page1 := make([]byte, boltPageHeader+boltMetaChecksum+8)
	n, _ = f.ReadAt(page1, int64(m0.pageSize))
	f.Close()
	m1, err := readBoltMeta(page1[:n])
	if err != nil {
		return &CorruptError{File: path, Err: fmt.Errorf("second meta page: %w", err)}
	}
	hwm := max(m0.hwm, m1.hwm)
	if need := int64(hwm) * int64(m0.pageSize); st.Size() < need {
		return &CorruptError{File: path, Err: fmt.Errorf("file is %d bytes but its meta pages say %d pages of %d bytes are in use (truncated?)", st.Size(), hwm, m0.pageSize)}
	}
	return Guard(path, func() error { return walkBolt(path) })
}

// ErrLocked means another process holds the data dir's Raft log open.
var ErrLocked = errors.New("locked by another process (is another rlnode using this data dir?)")

func walkBolt(path string) error {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		if errors.Is(err, bbolt.ErrTimeout) {
			return fmt.Errorf("%s: %w", path, ErrLocked)
		}
		return &CorruptError{File: path, Err: err}
	}
	defer db.Close()
	return db.View(func(tx *bbolt.Tx) error {
		// Touch every reachable page on this goroutine first, where a
		// fault is recoverable; Bolt's check then runs on its own
		// goroutine over pages known to be readable.
		var walk func(b *bbolt.Bucket) error
		walk = func(b *bbolt.Bucket) error {
			return b.ForEach(func(k, v []byte) error {
				if v == nil {
					if sub := b.Bucket(k); sub != nil {
						return walk(sub)
					}
				}
				return nil
			})
		}
		err := tx.ForEach(func(name []byte, b *bbolt.Bucket) error { return walk(b) })
		if err != nil {
			return &CorruptError{File: path, Err: err}
		}
		var errs []error
		for e := range tx.Check() {
			if len(errs) < 5 {
				errs = append(errs, e)
			}
		}
		if len(errs) > 0 {
			return &CorruptError{File: path, Err: errors.Join(errs...)}
		}
		return nil
	})
}

// CheckLogStore reads every entry of a log store and its term keys, and
// checks the payload of every entry that carries a checksum, so a damaged
// entry stops the node now instead of panicking raft or diverging later.
func CheckLogStore(file string, logs raft.LogStore, stable raft.StableStore) error {
	return Guard(file, func() error {
		for _, k := range []string{"CurrentTerm", "LastVoteTerm"} {
			if _, err := stable.GetUint64([]byte(k)); err != nil && !errors.Is(err, raftboltdb.ErrKeyNotFound) {
				return &CorruptError{File: file, Err: fmt.Errorf("read %s: %w", k, err)}
			}
		}
		first, err := logs.FirstIndex()
		if err != nil {
			return &CorruptError{File: file, Err: fmt.Errorf("read first index: %w", err)}
		}
		last, err := logs.LastIndex()
		if err != nil {
			return &CorruptError{File: file, Err: fmt.Errorf("read last index: %w", err)}
		}
		if first == 0 {
			return nil
		}
		var l raft.Log
		for i := first; i <= last; i++ {
			if err := logs.GetLog(i, &l); err != nil {
				return &CorruptError{File: file, Err: fmt.Errorf("read log entry %d of %d..%d: %w", i, first, last, err)}
			}
			if l.Index != i {
				return &CorruptError{File: file, Err: fmt.Errorf("log entry %d says it is entry %d", i, l.Index)}
			}
			if err := fsm.VerifyChecksum(&l); err != nil {
				return &CorruptError{File: file, Err: err}
			}
		}
		return nil
	})
}

// CheckSnapshots checks the snapshot store under dir: every snapshot's
// meta.json must decode, and the newest must pass its CRC and restore into
// a scratch state machine (raft would otherwise fall back to an older one
// and leave a gap before the log).
func CheckSnapshots(dir string, snaps *raft.FileSnapshotStore) error {
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return &CorruptError{File: dir, Err: err}
	}
	for _, e := range ents {
		if !e.IsDir() || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		meta := filepath.Join(dir, e.Name(), "meta.json")
		b, err := boundedfile.Read(meta, MaxMetaFileBytes)
		if err != nil {
			return &CorruptError{File: meta, Err: err}
		}
		var m raft.SnapshotMeta
		if err := json.Unmarshal(b, &m); err != nil {
			return &CorruptError{File: meta, Err: err}
		}
	}
	list, err := snaps.List()
	if err != nil {
		return &CorruptError{File: dir, Err: err}
	}
	if len(list) == 0 {
		return nil
	}
	sort.SliceStable(list, func(i, j int) bool { return list[i].Index > list[j].Index })
	state := filepath.Join(dir, list[0].ID, "state.bin")
	return Guard(state, func() error {
		_, rc, err := snaps.Open(list[0].ID)
		if err != nil {
			return &CorruptError{File: state, Err: err}
		}
		if err := fsm.New(fsm.Config{}).Restore(rc); err != nil {
			return &CorruptError{File: state, Err: err}
		}
		return nil
	})
}
