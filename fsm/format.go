package fsm

import (
	"github.com/rlnode/rlnode/policy"
	"github.com/rlnode/rlnode/window"
)

// Format is the log and snapshot format a node writes and can apply. A
// release that adds an entry kind, a policy option or a snapshot section
// that older nodes cannot apply raises it; the cluster's effective format
// is the lowest any voter supports (cluster's version gate), and a write
// that needs more is refused before the log, so no node ever halts on an
// entry it cannot read.
type Format uint32

const (
	// FormatR3 is what round 3 (bd9eb85) writes and reads: hits v2,
	// leases, counters, whole-table replace, refunds, snapshot v3.
	FormatR3 Format = 3
	// FormatR4 adds this round's entry kinds and policy options.
	FormatR4 Format = 4
	// FormatR5 adds round 5's entry kinds and policy options: regions
	// (scope global, mirrored, the slice entry), the bounded settle
	// (ReservationSettleBounded) and per-call limits (the calls entry).
	FormatR5 Format = 5
	// CurrentFormat is what this build writes and reads.
	CurrentFormat = FormatR5
	// OldestFormat is the lowest format this build still reads.
	OldestFormat = FormatR3
)

// What FormatR3 (bd9eb85) decodes in a policy: its option bits and its
// algorithm codes. Anything else halts an R3 node (codec2.go's policy
// decoder), so it needs FormatR4 on every voter.
const (
	r3Options      = optLeased | optEpochAlign
	r3MaxAlgorithm = window.TokenBucket
)

// PolicyFormat is the lowest format whose nodes can apply an entry
// carrying p: a policy option or algorithm added in a later format needs
// that format on every voter.
func PolicyFormat(p policy.Policy) Format {
	switch {
	case policyOptions(p)&(optGlobal|optMirrored) != 0:
		return FormatR5 // an R4 node halts on these option bits
	case p.IsConcurrency(): // algorithm byte 5: a round-3 node's decoder refuses it
		return FormatR4
	case policyOptions(p)&^r3Options != 0 || p.Alg() > r3MaxAlgorithm:
		return FormatR4 // e.g. optCalendar, optShadow
	}
	return FormatR3
}

// PoliciesFormat is the highest PolicyFormat of ps.
func PoliciesFormat(ps []policy.Policy) Format {
	f := OldestFormat
	for _, p := range ps {
		f = max(f, PolicyFormat(p))
	}
	return f
}
