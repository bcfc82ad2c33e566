package main

import (
	"flag"

	"github.com/rlnode/rlnode/cluster"
)

// budgetCaps are the per-credential bounds of permits and reservations
// (cluster.CredentialCaps; docs/budgets.md, "Budgets per credential").
type budgetCaps struct {
	permits, reservedBytes, reservedBytesTotal int64
}

func (b *budgetCaps) flags(fs *flag.FlagSet) {
	fs.Int64Var(&b.permits, "permits-per-credential", cluster.DefaultPermitsPerCredential,
		"most concurrency permits one credential (client certificate, else token, else source address) may hold live across the cluster; renewals count (1 to 1048576)")
	fs.Int64Var(&b.reservedBytes, "reserved-bytes-per-credential", cluster.DefaultReservedBytesPerCredential,
		"most bytes one credential's reservations may hold until their TTLs (keys by their length; at least 1024, at most --reserved-bytes)")
	fs.Int64Var(&b.reservedBytesTotal, "reserved-bytes", cluster.DefaultReservedBytesTotal,
		"most bytes every credential's reservations together may hold until their TTLs")
}

func (b *budgetCaps) caps() cluster.CredentialCaps {
	return cluster.CredentialCaps{Permits: b.permits, ReservedBytes: b.reservedBytes, ReservedBytesTotal: b.reservedBytesTotal}
}

func (b *budgetCaps) validate() []error {
	if err := b.caps().Validate(); err != nil {
		return []error{err}
	}
	return nil
}
