package cli

import (
	"os"
	"strings"
)

// EnvAddr names the variable every command that takes --addr reads its
// default from, set once per shell (like VAULT_ADDR or ETCDCTL_ENDPOINTS):
// one node or a comma list. The flag wins over it.
const EnvAddr = "RLNODE_ADDR"

// LocalAddr is where `rlnode serve` listens by default.
const LocalAddr = "http://127.0.0.1:8080"

// DefaultAddr is $RLNODE_ADDR, else LocalAddr.
func DefaultAddr() string {
	if v := strings.TrimSpace(os.Getenv(EnvAddr)); v != "" {
		return v
	}
	return LocalAddr
}
