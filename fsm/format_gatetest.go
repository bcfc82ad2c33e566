//go:build rlnode_gatetest

package fsm

import (
	"strings"

	"github.com/rlnode/rlnode/policy"
)

// GateTestPrefix names the policies that a binary built with the
// rlnode_gatetest tag treats as needing FormatR4, so the rolling-upgrade
// test (cmd/rlnode) exercises the version gate before a real R4 policy
// feature exists on its branch. Release builds never set the tag.
const GateTestPrefix = "gatetest-r4-"

// gateTestFormat is FormatR4 for policies named GateTestPrefix*.
func gateTestFormat(p policy.Policy) Format {
	if strings.HasPrefix(p.Name, GateTestPrefix) {
		return FormatR4
	}
	return FormatR3
}
