package fsm

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"slices"
	"strings"

	"github.com/rlnode/rlnode/policy"
)

// TableVersion names a policy table by its content: the first 128 bits of
// a SHA-256 over its policies, sorted by name, each in the log entry's
// encoding (everything a policy replicates, nothing else). Every replica
// holding the same table gives the same version, whatever its applied
// index, restores or restarts; two tables that differ in any policy give
// different versions. A whole-table write names the version it was computed
// from and the leader refuses it when the table's version moved
// (cluster/DESIGN.md, "No lost update").
func TableVersion(ps []policy.Policy) string {
	sorted := slices.Clone(ps)
	slices.SortFunc(sorted, func(a, b policy.Policy) int { return strings.Compare(a.Name, b.Name) })
	h := sha256.New()
	var n, body []byte
	h.Write(binary.AppendUvarint(n, uint64(len(sorted))))
	for _, p := range sorted {
		body = appendPolicyBody(body[:0], p)
		// Length-prefixed, so no two lists encode to the same bytes.
		n = binary.AppendUvarint(n[:0], uint64(len(body)))
		h.Write(n)
		h.Write(body)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// PolicyTable returns the replicated table sorted by name and its
// TableVersion, read together.
func (f *FSM) PolicyTable() ([]policy.Policy, string) {
	ps := f.Policies()
	return ps, TableVersion(ps)
}
