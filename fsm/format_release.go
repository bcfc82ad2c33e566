//go:build !rlnode_gatetest

package fsm

import "github.com/rlnode/rlnode/policy"

// gateTestFormat is FormatR3 in release builds: no policy needs a newer
// format for the gate's test alone (format_gatetest.go).
func gateTestFormat(policy.Policy) Format { return FormatR3 }
