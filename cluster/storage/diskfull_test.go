package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"testing"
)

// A full disk is recognised through the wrapped errno, and through the
// text of the libraries that format their cause with %v.
func TestIsDiskFull(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&fs.PathError{Op: "write", Path: "/d/wal/00001.wal", Err: syscall.ENOSPC}, true},
		{fmt.Errorf("open raft log: %w", &os.SyscallError{Syscall: "fallocate", Err: syscall.ENOSPC}), true},
		{fmt.Errorf("open raft log /d/wal (corrupt WAL? ...): %v", syscall.ENOSPC), true},
		{&CorruptError{File: "/d/wal", Err: errors.New("write /d/wal/x: no space left on device")}, true},
		{fmt.Errorf("%v", syscall.EDQUOT), true},
		{errors.New("checksum mismatch at entry 7"), false},
		{&fs.PathError{Op: "open", Path: "/d/raft.db", Err: syscall.EACCES}, false},
		{nil, false},
	} {
		if got := IsDiskFull(c.err); got != c.want {
			t.Errorf("IsDiskFull(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
