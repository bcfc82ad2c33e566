package storage

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/hashicorp/raft-wal/migrate"
)

// Summary identifies a log's contents: its index range, the last entry's
// term and a SHA-256 over every entry (index, term, type, data, extensions).
type Summary struct {
	First, Last, LastTerm uint64
	Entries               uint64
	Digest                string
}

func (s Summary) String() string {
	return fmt.Sprintf("entries %d..%d (%d), last term %d, digest %s", s.First, s.Last, s.Entries, s.LastTerm, s.Digest[:16])
}

// Summarize reads every entry of a log.
func Summarize(ctx context.Context, l raft.LogStore) (Summary, error) {
	var s Summary
	var err error
	if s.First, err = l.FirstIndex(); err != nil {
		return s, fmt.Errorf("first index: %w", err)
	}
	if s.Last, err = l.LastIndex(); err != nil {
		return s, fmt.Errorf("last index: %w", err)
	}
	h := sha256.New()
	var hdr [25]byte
	for i := s.First; s.Last > 0 && i <= s.Last; i++ {
		if err := ctx.Err(); err != nil {
			return s, err
		}
		var e raft.Log
		if err := l.GetLog(i, &e); err != nil {
			return s, fmt.Errorf("read entry %d: %w", i, err)
		}
		binary.BigEndian.PutUint64(hdr[0:], e.Index)
		binary.BigEndian.PutUint64(hdr[8:], e.Term)
		hdr[16] = byte(e.Type)
		binary.BigEndian.PutUint32(hdr[17:], uint32(len(e.Data)))
		binary.BigEndian.PutUint32(hdr[21:], uint32(len(e.Extensions)))
		h.Write(hdr[:])
		h.Write(e.Data)
		h.Write(e.Extensions)
		s.Entries++
		s.LastTerm = e.Term
	}
	s.Digest = fmt.Sprintf("%x", h.Sum(nil))
	return s, nil
}

// Result says what a conversion did.
type Result struct {
	From, To Kind
	Log      Summary
	// Backup is where the old log was kept.
	Backup string
}

// copyBatchBytes is how much log data each append of a conversion carries.
const copyBatchBytes = 1 << 20

// Migrate converts the log of a stopped node's data dir to kind to. It
// copies every entry into a new store beside the old one, checks that the
// copy has the same index range, last term and digest, and only then
// switches the data dir over with a rename. The old log is kept as a
// backup (Result.Backup). A node that is running holds raft.db's lock and
// is refused.
func Migrate(ctx context.Context, dir string, to Kind, logger hclog.Logger) (Result, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	from, found, err := Detect(dir)
	if err != nil {
		return Result{}, err
	}
	if !found {
		return Result{}, fmt.Errorf("%s holds no raft log (neither %s nor %s/)", dir, BoltFile, WALDir)
	}
	if from == to {
		return Result{}, fmt.Errorf("%s already holds a %s raft log", dir, to)
	}
	res := Result{From: from, To: to}
	stamp := time.Now().UTC().Format("20060102T150405Z")
	switch to {
	case WAL:
		err = toWAL(ctx, dir, stamp, logger, &res)
	case Bolt:
		err = toBolt(ctx, dir, stamp, logger, &res)
	default:
		err = fmt.Errorf("raft log kind %q: want wal or bolt", to)
	}
	return res, err
}

// toWAL: copy raft.db's log into wal.migrating/, verify, back raft.db up,
// rename wal.migrating/ to wal/ (the switch), then empty raft.db's log.
// Before the rename the dir is bolt as it was; after it, wal, and raft.db's
// old entries are ignored until they are deleted.
func toWAL(ctx context.Context, dir, stamp string, logger hclog.Logger, res *Result) error {
	src, err := open(dir, Bolt, logger)
	if err != nil {
		return err
	}
	defer func() {
		if src != nil {
			src.Close()
		}
	}()
	tmp := filepath.Join(dir, WALDir+".migrating")
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("remove leftover %s: %w", tmp, err)
	}
	dst, err := openWAL(tmp, logger)
	if err != nil {
		return err
	}
	sum, err := copyAndVerify(ctx, dst, src.Log)
	dst.Close()
	if err != nil {
		os.RemoveAll(tmp)
		return err
	}
	if err := verifyReopened(ctx, sum, func() (raft.LogStore, io.Closer, error) {
		w, err := openWAL(tmp, logger)
		return w, w, err
	}); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	res.Log = sum
	if err := src.Close(); err != nil {
		return err
	}
	src = nil
	res.Backup = filepath.Join(dir, BoltFile+".bolt-log-"+stamp)
	if err := copyFile(filepath.Join(dir, BoltFile), res.Backup); err != nil {
		return fmt.Errorf("back up %s: %w", BoltFile, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, WALDir)); err != nil {
		return fmt.Errorf("switch to the new log: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	// raft.db is now the stable store only; drop its old entries.
	b, err := openBolt(filepath.Join(dir, BoltFile))
	if err != nil {
		return err
	}
	if sum.Last > 0 {
		err = b.DeleteRange(sum.First, sum.Last)
	}
	if cerr := b.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("converted, but emptying the old log in %s failed (harmless: a wal data dir ignores it): %w", BoltFile, err)
	}
	return nil
}

// toBolt: build raft.db.migrating with wal/'s log and raft.db's stable
// keys, verify, rename it over raft.db (the stable store keeps the same
// term and vote), then rename wal/ to a backup (the switch). Between the
// two renames the dir is still wal, with a stable store that holds the
// same keys.
func toBolt(ctx context.Context, dir, stamp string, logger hclog.Logger, res *Result) error {
	src, err := open(dir, WAL, logger)
	if err != nil {
		return err
	}
	defer func() {
		if src != nil {
			src.Close()
		}
	}()
	tmp := filepath.Join(dir, BoltFile+".migrating")
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove leftover %s: %w", tmp, err)
	}
	dst, err := openBolt(tmp)
	if err != nil {
		return err
	}
	sum, err := copyAndVerify(ctx, dst, src.Log)
	if err == nil {
		err = copyStable(dst, src.Stable)
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = verifyReopened(ctx, sum, func() (raft.LogStore, io.Closer, error) {
			b, err := openBolt(tmp)
			return b, b, err
		})
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	res.Log = sum
	if err := src.Close(); err != nil {
		return err
	}
	src = nil
	if err := os.Rename(tmp, filepath.Join(dir, BoltFile)); err != nil {
		return fmt.Errorf("install the new log: %w", err)
	}
	res.Backup = filepath.Join(dir, WALDir+".wal-log-"+stamp)
	if err := os.Rename(filepath.Join(dir, WALDir), res.Backup); err != nil {
		return fmt.Errorf("switch to the new log: %w", err)
	}
	return syncDir(dir)
}

func copyAndVerify(ctx context.Context, dst, src raft.LogStore) (Summary, error) {
	want, err := Summarize(ctx, src)
	if err != nil {
		return want, fmt.Errorf("read the old log: %w", err)
	}
	if want.Last > 0 {
		if err := migrate.CopyLogs(ctx, dst, src, copyBatchBytes, nil); err != nil {
			return want, fmt.Errorf("copy the log: %w", err)
		}
	}
	return want, nil
}

// verifyReopened opens the copy afresh (what the node will read) and
// compares it with the original.
func verifyReopened(ctx context.Context, want Summary, reopen func() (raft.LogStore, io.Closer, error)) error {
	l, c, err := reopen()
	if err != nil {
		return fmt.Errorf("reopen the copy: %w", err)
	}
	defer c.Close()
	got, err := Summarize(ctx, l)
	if err != nil {
		return fmt.Errorf("read the copy: %w", err)
	}
	if want.Last == 0 && got.Last == 0 {
		return nil
	}
	if got != want {
		return fmt.Errorf("the copy differs from the original (copy: %s; original: %s); nothing was changed", got, want)
	}
	return nil
}

// stableKeys are the keys hashicorp/raft keeps in its stable store.
var stableKeys = []struct {
	key  string
	uint bool
}{{"CurrentTerm", true}, {"LastVoteTerm", true}, {"LastVoteCand", false}}

// copyStable copies raft's stable keys; a key never written (a node that
// never voted) stays unwritten. (raft-wal's migrate.CopyStable fails on a
// missing key.)
func copyStable(dst, src raft.StableStore) error {
	for _, k := range stableKeys {
		var err error
		if k.uint {
			var v uint64
			if v, err = src.GetUint64([]byte(k.key)); err == nil {
				err = dst.SetUint64([]byte(k.key), v)
			}
		} else {
			var v []byte
			if v, err = src.Get([]byte(k.key)); err == nil {
				err = dst.Set([]byte(k.key), v)
			}
		}
		if err != nil && !errors.Is(err, raftboltdb.ErrKeyNotFound) {
			return fmt.Errorf("copy stable key %s: %w", k.key, err)
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
