package boundedfile_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/internal/boundedfile"
)

func write(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestReadsARegularFileAndALinkToOne(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a.yaml")
	write(t, file, "hello")
	link := filepath.Join(dir, "link.yaml")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{file, link} {
		if b, err := boundedfile.Read(p, 5); err != nil || string(b) != "hello" {
			t.Fatalf("Read(%s, 5) = %q, %v", p, b, err)
		}
	}
}

func TestRefusesAFileOverTheCapBeforeReading(t *testing.T) {
	file := filepath.Join(t.TempDir(), "big.yaml")
	// A sparse file: its size says 3 GB, reading it would take that much.
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(3 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = boundedfile.Read(file, 512<<10)
	if !errors.Is(err, boundedfile.ErrTooLarge) || !strings.Contains(err.Error(), file) {
		t.Fatalf("Read of a 3 GB sparse file with a 512 KiB cap: %v; want ErrTooLarge naming it", err)
	}
	write(t, file, "123456")
	if _, err := boundedfile.Read(file, 5); !errors.Is(err, boundedfile.ErrTooLarge) {
		t.Fatalf("6 bytes with a cap of 5: %v", err)
	}
}

// A device read would never end: /dev/zero, directly or through a link.
func TestRefusesADevice(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero here")
	}
	link := filepath.Join(t.TempDir(), "z.yaml")
	if err := os.Symlink("/dev/zero", link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/dev/zero", link} {
		_, err := boundedfile.Read(p, 1<<20)
		if !errors.Is(err, boundedfile.ErrNotRegular) || !strings.Contains(err.Error(), p+" is a character device") {
			t.Fatalf("Read(%s): %v; want ErrNotRegular naming it", p, err)
		}
	}
}

// A FIFO with no writer would block open and read forever.
func TestRefusesAFIFOWithoutBlocking(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "p.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := boundedfile.Read(fifo, 1<<20)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, boundedfile.ErrNotRegular) || !strings.Contains(err.Error(), "named pipe") {
			t.Fatalf("Read of a FIFO: %v; want ErrNotRegular", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Read of a FIFO with no writer blocked")
	}
}

func TestRefusesADirectoryAndASocket(t *testing.T) {
	dir := t.TempDir()
	if _, err := boundedfile.Read(dir, 1<<20); !errors.Is(err, boundedfile.ErrNotRegular) || !strings.Contains(err.Error(), "directory") {
		t.Fatalf("Read of a directory: %v", err)
	}
	sock := filepath.Join(dir, "s.yaml")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Skipf("unix socket: %v", err)
	}
	defer ln.Close()
	// Opening a socket fails in the kernel (ENXIO); either way it is
	// refused with its name.
	if _, err := boundedfile.Read(sock, 1<<20); err == nil || !strings.Contains(err.Error(), sock) {
		t.Fatalf("Read of a socket: %v; want an error naming it", err)
	}
}

func TestOpenReturnsTheCheckedFileAndSize(t *testing.T) {
	file := filepath.Join(t.TempDir(), "backup")
	write(t, file, "0123456789")
	f, size, err := boundedfile.Open(file, 10)
	if err != nil || size != 10 {
		t.Fatalf("Open: %d %v", size, err)
	}
	f.Close()
	if _, _, err := boundedfile.Open(file, 9); !errors.Is(err, boundedfile.ErrTooLarge) {
		t.Fatalf("Open over the cap: %v", err)
	}
	if _, _, err := boundedfile.Open(filepath.Join(t.TempDir(), "missing"), 9); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open of a missing file: %v", err)
	}
}

// The read itself is capped, not only the size checked first: a /proc
// file says it is 0 bytes and holds more.
func TestCapsTheReadOfAFileLargerThanItsSize(t *testing.T) {
	const proc = "/proc/self/maps"
	st, err := os.Stat(proc)
	if err != nil || st.Size() != 0 {
		t.Skipf("no %s of size 0 here", proc)
	}
	_, err = boundedfile.Read(proc, 16)
	if !errors.Is(err, boundedfile.ErrTooLarge) || !strings.Contains(err.Error(), "grew past") {
		t.Fatalf("Read of %s with a cap of 16: %v; want ErrTooLarge", proc, err)
	}
}

func TestReadDirListsSortedAndRefusesAFIFO(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"b", "a", "c"} {
		write(t, filepath.Join(dir, n), n)
	}
	ents, err := boundedfile.ReadDir(dir, 3)
	if err != nil || len(ents) != 3 || ents[0].Name() != "a" || ents[2].Name() != "c" {
		t.Fatalf("ReadDir: %v %v", ents, err)
	}
	if _, err := boundedfile.ReadDir(dir, 2); !errors.Is(err, boundedfile.ErrTooLarge) {
		t.Fatalf("ReadDir of 3 entries with a cap of 2: %v", err)
	}
	fifo := filepath.Join(dir, "p")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	if _, err := boundedfile.ReadDir(fifo, 10); !errors.Is(err, boundedfile.ErrNotDir) || !strings.Contains(err.Error(), fifo+" is a named pipe") {
		t.Fatalf("ReadDir of a FIFO: %v", err)
	}
	if _, err := boundedfile.ReadDir(filepath.Join(dir, "a"), 10); !errors.Is(err, boundedfile.ErrNotDir) {
		t.Fatalf("ReadDir of a file: %v", err)
	}
}
