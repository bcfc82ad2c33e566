package client_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rlnode/rlnode/client"
)

// The CA, certificate and key files are read bounded (issue 35, item 10):
// a FIFO or a link to /dev/zero named by mistake is refused with its name
// at once, where it hung or ran the program out of memory.
func TestTLSFilesAreReadBounded(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "ca.pem")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	if _, err := client.TLSFromFiles("", "", fifo); err == nil || !strings.Contains(err.Error(), fifo+" is a named pipe (FIFO)") {
		t.Fatalf("a FIFO as CA file: %v; want a refusal naming it", err)
	}
	if _, err := os.Stat("/dev/zero"); err != nil {
		return
	}
	zero := filepath.Join(dir, "client.pem")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	if _, err := client.TLSFromFiles(zero, zero, ""); err == nil || !strings.Contains(err.Error(), zero+" is a character device") {
		t.Fatalf("a /dev/zero link as certificate: %v; want a refusal naming it", err)
	}
	if _, err := client.TLSFromFiles("", "", zero); err == nil || !strings.Contains(err.Error(), zero+" is a character device") {
		t.Fatalf("a /dev/zero link as CA file: %v; want a refusal naming it", err)
	}
}
