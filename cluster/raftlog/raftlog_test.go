package raftlog

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
	s, err := Open(dir, "", nil)
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
	s, err := Open(dir, Bolt, nil)
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
	s, err := Open(dir, WAL, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err = Open(dir, Bolt, nil)
	var me *MismatchError
	if !errors.As(err, &me) || me.OnDisk != WAL || me.Want != Bolt {
		t.Fatalf("bolt on a wal dir: %v", err)
	}
	if err := os.Remove(filepath.Join(dir, BoltFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, "", nil); err == nil || !strings.Contains(err.Error(), "no raft.db") {
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
