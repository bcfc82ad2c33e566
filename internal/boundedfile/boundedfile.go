// Package boundedfile reads the files a user names (policy files, Envoy
// configurations, certificates and keys, token files, backups) so that no
// name can make rlnode read without end or wait forever: only a regular
// file is read (a symlink to one is fine), its size is checked before
// reading and the read itself is capped, and a device, FIFO, socket or
// directory is refused with an error naming the path. Stdlib only.
package boundedfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"
)

var (
	// ErrNotRegular refuses a path that is not a regular file (or a
	// symlink to one): a device such as /dev/zero would never end, a FIFO
	// would block until a writer comes.
	ErrNotRegular = errors.New("not a regular file")
	// ErrNotDir refuses a path given as a directory that is not one.
	ErrNotDir = errors.New("not a directory")
	// ErrTooLarge refuses a file larger than the reader's cap.
	ErrTooLarge = errors.New("file too large")
)

// Open opens the regular file at path for reading and returns it with its
// size, refusing one larger than max bytes. It opens with O_NONBLOCK, so a
// FIFO never blocks the open, and checks the type on the opened
// descriptor, so the file read is the file checked. The caller should
// still read at most size (or max) bytes: a file may grow.
func Open(path string, max int64) (*os.File, int64, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, 0, fmt.Errorf("%s is %s: %w", path, kind(st.Mode()), ErrNotRegular)
	}
	if st.Size() > max {
		f.Close()
		return nil, 0, fmt.Errorf("%s is %d bytes, more than the %d this file may be: %w", path, st.Size(), max, ErrTooLarge)
	}
	return f, st.Size(), nil
}

// Read returns the contents of the regular file at path, of at most max
// bytes (see Open). A file that grows past max while it is read is refused
// too: the read stops at max+1 bytes.
func Read(path string, max int64) ([]byte, error) {
	f, _, err := Open(path, max)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s grew past the %d bytes this file may be while it was read: %w", path, max, ErrTooLarge)
	}
	return b, nil
}

// ReadDir lists the directory at path (a link to one is fine), sorted by
// name, refusing one with more than max entries. Like Open it never
// blocks on a FIFO given in place of a directory, and refuses anything
// that is not a directory with its name.
func ReadDir(path string, max int) ([]os.DirEntry, error) {
	d, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	st, err := d.Stat()
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%s is %s: %w", path, kind(st.Mode()), ErrNotDir)
	}
	ents, err := d.ReadDir(max + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read directory %s: %w", path, err)
	}
	if len(ents) > max {
		return nil, fmt.Errorf("%s holds more than %d entries, the most read from it: %w", path, max, ErrTooLarge)
	}
	slices.SortFunc(ents, func(a, b os.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return ents, nil
}

// kind names what a non-regular file is, for the error.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m.IsRegular():
		return "a regular file"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	default:
		return fmt.Sprintf("not a regular file (mode %s)", m.Type())
	}
}
