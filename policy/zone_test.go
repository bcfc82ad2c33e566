package policy

import (
	"archive/zip"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Every node must cut calendar periods by the same rules, whatever zone
// files its host has: a $ZONEINFO (or /usr/share/zoneinfo) whose Berlin is
// UTC must not change Berlin for rlnode.
func TestLoadZoneIgnoresTheHostsZoneFiles(t *testing.T) {
	idx, err := zoneIndex()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := idx["UTC"].Open()
	if err != nil {
		t.Fatal(err)
	}
	utc, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	fake := filepath.Join(t.TempDir(), "zoneinfo.zip")
	f, err := os.Create(fake)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	w, err := zw.CreateHeader(&zip.FileHeader{Name: "Europe/Berlin", Method: zip.Store}) // Go reads only stored entries
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(utc); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	t.Setenv("ZONEINFO", fake)

	loc, err := LoadZone("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	if _, off := time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC).In(loc).Zone(); off != 3600 {
		t.Fatalf("Berlin in January is UTC%+d s; want +3600 (the host's zone files were used)", off)
	}
	if _, err := LoadZone("Mars/Olympus_Mons"); err == nil {
		t.Fatal("an unknown zone loaded")
	}
	if loc, err := LoadZone(""); err != nil || loc != time.UTC {
		t.Fatalf(`LoadZone("") = %v, %v; want UTC`, loc, err)
	}
}
