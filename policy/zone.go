package policy

import (
	"archive/zip"
	"bytes"
	_ "embed"
	"fmt"
	"io"
	"sync"
	"time"
)

// MaxZoneLen bounds a time zone's name (the longest IANA names are about
// 30 bytes); the log codec reads no longer one.
const MaxZoneLen = 64

// ZoneDatabase names the IANA release of zoneinfo.zip, the zone database
// every calendar decision uses (Go 1.26's lib/time/zoneinfo.zip). A
// release that updates it says so in CHANGELOG.md.
const ZoneDatabase = "2025c"

// zoneinfoZip is the only zone database calendar policies read. Periods
// are cut by the state machine on every node, so every node must use the
// same rules: time.LoadLocation would prefer each host's own
// /usr/share/zoneinfo (or $ZONEINFO), which differs between images and
// hosts, so rlnode never asks it.
//
//go:embed zoneinfo.zip
var zoneinfoZip []byte

// zoneIndex is zoneinfoZip's directory, read once; it is immutable after.
var zoneIndex = sync.OnceValues(func() (map[string]*zip.File, error) {
	r, err := zip.NewReader(bytes.NewReader(zoneinfoZip), int64(len(zoneinfoZip)))
	if err != nil {
		return nil, fmt.Errorf("read the built-in zone database: %w", err)
	}
	idx := make(map[string]*zip.File, len(r.File))
	for _, f := range r.File {
		idx[f.Name] = f
	}
	return idx, nil
})

// LoadZone loads a calendar policy's time zone by its IANA name from the
// built-in database; "" and "UTC" are UTC. "Local" is refused: it would be
// each node's own zone, and nodes must cut periods at the same instants.
func LoadZone(name string) (*time.Location, error) {
	if len(name) > MaxZoneLen {
		return nil, fmt.Errorf("timezone %.16q...: over %d bytes, no IANA zone is that long", name, MaxZoneLen)
	}
	if name == "" || name == "UTC" {
		return time.UTC, nil
	}
	if name == "Local" {
		return nil, fmt.Errorf("timezone %q: name a zone such as Europe/Berlin; Local differs from node to node", name)
	}
	unknown := fmt.Errorf("timezone %q is not a known IANA time zone (such as Europe/Berlin or America/New_York)", name)
	idx, err := zoneIndex()
	if err != nil {
		return nil, err
	}
	f, ok := idx[name]
	if !ok || f.UncompressedSize64 > 1<<16 {
		return nil, unknown
	}
	rc, err := f.Open()
	if err != nil {
		return nil, fmt.Errorf("timezone %q: %w", name, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, 1<<16))
	if err != nil {
		return nil, fmt.Errorf("timezone %q: %w", name, err)
	}
	loc, err := time.LoadLocationFromTZData(name, data)
	if err != nil {
		return nil, unknown
	}
	return loc, nil
}
