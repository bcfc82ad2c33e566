package storage

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

func fill(t *testing.T, s *Stores, from, to uint64) {
	t.Helper()
	var logs []*raft.Log
	for i := from; i <= to; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1 + i/10, Type: raft.LogCommand, Data: []byte{byte(i), 1, 2}, Extensions: []byte("x")})
	}
	if err := s.Log.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := s.Stable.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
}

func summary(t *testing.T, dir string, want Kind) Summary {
	t.Helper()
	s, err := OpenStores(dir, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Kind != want {
		t.Fatalf("kind %s, want %s", s.Kind, want)
	}
	if term, err := s.Stable.GetUint64([]byte("CurrentTerm")); err != nil || term != 7 {
		t.Fatalf("CurrentTerm %d (%v) after conversion, want 7", term, err)
	}
	sum, err := Summarize(context.Background(), s.Log)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// A log that starts past 1 (truncated behind a snapshot) survives
// bolt -> wal -> bolt with the same range, terms and digest; LastVoteCand,
// never written, stays unwritten.
func TestMigrateRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStores(dir, Bolt, nil)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, s, 40, 300)
	s.Close()
	before := summary(t, dir, Bolt)
	if before.First != 40 || before.Last != 300 || before.Entries != 261 || before.LastTerm != 31 {
		t.Fatalf("before: %+v", before)
	}
	res, err := Migrate(context.Background(), dir, WAL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Log != before || !strings.HasPrefix(filepath.Base(res.Backup), "raft.db.bolt-log-") {
		t.Fatalf("result %+v, want log %+v", res, before)
	}
	if got := summary(t, dir, WAL); got != before {
		t.Fatalf("on wal: %+v, want %+v", got, before)
	}
	if _, err := Migrate(context.Background(), dir, Bolt, nil); err != nil {
		t.Fatal(err)
	}
	if got := summary(t, dir, Bolt); got != before {
		t.Fatalf("back on bolt: %+v, want %+v", got, before)
	}
}

func TestOpenRefusesMismatchAndDetects(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStores(dir, WAL, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err = OpenStores(dir, Bolt, nil)
	var me *MismatchError
	if !errors.As(err, &me) || me.OnDisk != WAL || me.Want != Bolt {
		t.Fatalf("bolt on a wal dir: %v", err)
	}
	if err := os.Remove(filepath.Join(dir, BoltFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStores(dir, "", nil); err == nil || !strings.Contains(err.Error(), "no raft.db") {
		t.Fatalf("wal without raft.db: %v", err)
	}
	file := t.TempDir()
	os.WriteFile(filepath.Join(file, WALDir), []byte("x"), 0o644)
	if _, _, err := Detect(file); err == nil {
		t.Fatal("a file named wal: no error")
	}
	if k, found, err := Detect(t.TempDir()); found || k != "" || err != nil {
		t.Fatalf("empty dir: %s %v %v", k, found, err)
	}
	if _, err := ParseKind("lsm"); err == nil {
		t.Fatal("ParseKind(lsm): no error")
	}
}

// A wal data dir whose wal/ was deleted is a lost log, never a Bolt data
// dir with an empty log (a node on that would vote without the entries it
// once acknowledged). A Bolt data dir, and one converted back from wal, are
// not flagged.
func TestWALMissingIsALostLog(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStores(dir, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, s, 1, 10)
	s.Close()
	if lost, err := WALMissing(dir); lost || err != nil {
		t.Fatalf("healthy wal dir: lost %v, %v", lost, err)
	}
	if err := os.RemoveAll(filepath.Join(dir, WALDir)); err != nil {
		t.Fatal(err)
	}
	if lost, err := WALMissing(dir); !lost || err != nil {
		t.Fatalf("wal dir without wal/: lost %v, %v; want true", lost, err)
	}
	if s, err := OpenStores(dir, "", nil); !errors.Is(err, ErrWALMissing) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("open a wal dir without wal/: %v, want ErrWALMissing", err)
	}

	bolt := t.TempDir()
	s, err = OpenStores(bolt, Bolt, nil)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, s, 1, 10)
	s.Close()
	if _, err := Migrate(context.Background(), bolt, WAL, nil); err != nil {
		t.Fatal(err)
	}
	summary(t, bolt, WAL) // a node ran on it: raft.db is marked
	if _, err := Migrate(context.Background(), bolt, Bolt, nil); err != nil {
		t.Fatal(err)
	}
	if lost, err := WALMissing(bolt); lost || err != nil {
		t.Fatalf("converted back to bolt: lost %v, %v", lost, err)
	}
	if got := summary(t, bolt, Bolt); got.Last != 10 {
		t.Fatalf("converted back to bolt: %+v", got)
	}
}

// A data dir held by another process (here: another open of the same
// stores) is refused as locked, never reported as corrupt.
func TestLockedDataDirIsLockedNotCorrupt(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStores(dir, Bolt, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := OpenStores(dir, "", nil); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open of the stores: %v, want ErrLocked", err)
	}
	_, err = Open(Options{Dir: dir, ID: "n1"})
	var corrupt *CorruptError
	if !errors.Is(err, ErrLocked) || errors.As(err, &corrupt) {
		t.Fatalf("open of a locked data dir: %v, want ErrLocked and no CorruptError", err)
	}
}
