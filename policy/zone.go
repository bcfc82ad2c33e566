package policy

import (
	"fmt"
	"time"

	// The zone database is built into every binary that reads policies,
	// so nodes without /usr/share/zoneinfo (distroless, scratch) still
	// know every zone; see LoadZone for which copy wins.
	_ "time/tzdata"
)

// MaxZoneLen bounds a time zone's name (the longest IANA names are about
// 30 bytes); the log codec reads no longer one.
const MaxZoneLen = 64

// LoadZone loads a calendar policy's time zone by its IANA name; "" and
// "UTC" are UTC. "Local" is refused: it would be each node's own zone,
// and nodes must cut periods at the same instants.
//
// time.LoadLocation prefers the system's zone files (ZONEINFO, then
// /usr/share/zoneinfo) to the copy built in; nodes must therefore run the
// same image, or set ZONEINFO to the same file (docs/budgets.md).
func LoadZone(name string) (*time.Location, error) {
	if len(name) > MaxZoneLen {
		return nil, fmt.Errorf("timezone %.16q...: over %d bytes, no IANA zone is that long", name, MaxZoneLen)
	}
	if name == "Local" {
		return nil, fmt.Errorf("timezone %q: name a zone such as Europe/Berlin; Local differs from node to node", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("timezone %q is not a known IANA time zone (such as Europe/Berlin or America/New_York)", name)
	}
	return loc, nil
}
